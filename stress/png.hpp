// PNG copies of the report's SVG charts, drawn by librsvg onto a cairo image surface: the same
// drawing as the SVG, for viewers and documents that take no SVG. No encoder of our own.
#pragma once

#include <string>

namespace troupe::plot {

// Writes `svg` rendered at its own size (times `scale`) to `path`; throws std::runtime_error
// naming the path and librsvg's or cairo's reason.
void write_png(const std::string& svg, const std::string& path, double scale = 1.0);

}  // namespace troupe::plot

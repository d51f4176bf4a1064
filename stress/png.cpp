// librsvg 2.52+ (Debian 12 ships 2.54): the intrinsic size in pixels, then render_document into
// a viewport of that size.
#include "stress/png.hpp"

#include <cairo.h>
#include <librsvg/rsvg.h>

#include <cmath>
#include <memory>
#include <stdexcept>

#include "storage/output_file.hpp"

namespace troupe::plot {

void write_png(const std::string& svg, const std::string& path, double scale) {
  GError* err = nullptr;
  auto fail = [&](const std::string& what) {
    std::string why = what;
    if (err) {
      why += std::string(": ") + err->message;
      g_error_free(err);
    }
    throw std::runtime_error(path + ": " + why);
  };
  std::unique_ptr<RsvgHandle, void (*)(gpointer)> handle(
      rsvg_handle_new_from_data(reinterpret_cast<const guint8*>(svg.data()), svg.size(), &err), g_object_unref);
  if (!handle) fail("librsvg could not read the SVG");
  double w = 0, h = 0;
  if (!rsvg_handle_get_intrinsic_size_in_pixels(handle.get(), &w, &h) || w <= 0 || h <= 0)
    fail("the SVG has no size in pixels (width and height attributes)");
  const int pw = static_cast<int>(std::ceil(w * scale)), ph = static_cast<int>(std::ceil(h * scale));
  std::unique_ptr<cairo_surface_t, void (*)(cairo_surface_t*)> surface(
      cairo_image_surface_create(CAIRO_FORMAT_ARGB32, pw, ph), cairo_surface_destroy);
  std::unique_ptr<cairo_t, void (*)(cairo_t*)> cr(cairo_create(surface.get()), cairo_destroy);
  cairo_scale(cr.get(), scale, scale);
  const RsvgRectangle viewport{0, 0, w, h};
  if (!rsvg_handle_render_document(handle.get(), cr.get(), &viewport, &err)) fail("librsvg could not draw the SVG");
  cairo_surface_flush(surface.get());
  // Encoded in memory, then written the one way troupe writes files (storage/output_file.hpp).
  std::string png;
  const cairo_status_t st = cairo_surface_write_to_png_stream(
      surface.get(),
      [](void* out, const unsigned char* data, unsigned int length) {
        static_cast<std::string*>(out)->append(reinterpret_cast<const char*>(data), length);
        return CAIRO_STATUS_SUCCESS;
      },
      &png);
  if (st != CAIRO_STATUS_SUCCESS) fail(std::string("cairo could not encode the PNG: ") + cairo_status_to_string(st));
  storage::write_output_file(path, png);
}

}  // namespace troupe::plot

// Planted among the actors by role (a stage source): the wiring that composes ranks is above them.
// Must not compile.
#include "actors/compose/mesh_links.hpp"

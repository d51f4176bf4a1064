// Planted in actors/plan/: the configuration is below it. Compiles (the failures above are the
// layers', not a broken include path).
#include "actors/config/train_config.hpp"
#include "kernels/tensor.hpp"

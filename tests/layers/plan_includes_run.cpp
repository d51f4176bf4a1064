// Planted in actors/plan/: the runner is two layers above it. Must not compile.
#include "actors/run/training_job.hpp"

// Planted in kernels/, the bottom layer: comm/ is above it. Must not compile.
#include "comm/tcp_socket.hpp"

// The safetensors file format (Hugging Face): an 8-byte little-endian header length, a JSON
// header {"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}}
// padded with spaces to 8 bytes, then the tensors' raw bytes. Tensors are held as flat float
// vectors: written as F32, read from F32, BF16 or F16 (widened, exactly); no memory mapping, no
// other dtypes. It is how troupe hands tensors to tools outside it (the PyTorch oracle in
// tests/oracle/) without a JSON or tensor library.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace troupe::storage {

struct named_tensor {
  std::string name;
  std::vector<int64_t> shape;  // {} is a scalar (one value)
  std::vector<float> values;   // row-major, product(shape) of them
};

using safetensors_metadata = std::map<std::string, std::string>;

// Writes path + ".tmp", fsyncs it and renames it to path, so a crash never leaves a half-written
// file under the final name. Tensors are stored in the order given. Throws std::invalid_argument
// for an empty, repeated or reserved ("__metadata__") name or a shape that does not match the
// values, std::runtime_error naming the file when the write fails.
void write_safetensors(const std::string& path, const std::vector<named_tensor>& tensors,
                       const safetensors_metadata& metadata = {});

// Every tensor of the file, in the order of their bytes, and the metadata if asked for. Throws
// std::runtime_error naming the file and the problem for a file that is truncated, whose header
// length runs past its end, whose header is not the JSON above, whose offsets leave the data,
// overlap or leave a gap, whose dtype is not F32, BF16 or F16, or whose shape does not match its
// bytes.
std::vector<named_tensor> read_safetensors(const std::string& path, safetensors_metadata* metadata = nullptr);

}  // namespace troupe::storage

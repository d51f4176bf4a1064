// Fashion-MNIST and the character corpus: loading, normalization, gathering batches.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <stdexcept>

#include "storage/dataset.hpp"
#include "storage/gzip_file.hpp"
#include "storage/idx.hpp"

namespace troupe::storage {

image_dataset::image_dataset(std::string name, int64_t features, std::vector<float> pixels,
                             std::vector<int32_t> labels)
    : name_(std::move(name)), features_(features), pixels_(std::move(pixels)), labels_(std::move(labels)) {
  if (static_cast<int64_t>(pixels_.size()) != features_ * size())
    throw std::invalid_argument(name_ + ": " + std::to_string(pixels_.size()) + " pixel values for " +
                                std::to_string(size()) + " samples of " + std::to_string(features_));
}

batch image_dataset::gather(const int64_t* idx, int64_t n) const {
  batch b;
  b.inputs = tensor::uninitialized({n, features_});
  b.targets.resize(static_cast<size_t>(n));
  float* out = b.inputs.data();
  for (int64_t i = 0; i < n; ++i) {
    if (idx[i] < 0 || idx[i] >= size()) throw std::out_of_range(name_ + ": sample " + std::to_string(idx[i]));
    std::copy_n(pixels_.data() + idx[i] * features_, features_, out + i * features_);
    b.targets[static_cast<size_t>(i)] = labels_[static_cast<size_t>(idx[i])];
  }
  return b;
}

text_dataset::text_dataset(std::string name, std::vector<int32_t> tokens, int64_t context)
    : name_(std::move(name)), tokens_(std::move(tokens)), context_(context) {
  if (context_ <= 0) throw std::invalid_argument("text dataset: context must be positive");
}

int64_t text_dataset::size() const {
  return tokens_.empty() ? 0 : (static_cast<int64_t>(tokens_.size()) - 1) / context_;
}

batch text_dataset::gather(const int64_t* idx, int64_t n) const {
  batch b;
  b.inputs = tensor::uninitialized({n, context_});
  b.targets.resize(static_cast<size_t>(n * context_));
  float* in = b.inputs.data();
  for (int64_t i = 0; i < n; ++i) {
    if (idx[i] < 0 || idx[i] >= size()) throw std::out_of_range(name_ + ": window " + std::to_string(idx[i]));
    const int32_t* w = tokens_.data() + idx[i] * context_;
    for (int64_t t = 0; t < context_; ++t) {
      in[i * context_ + t] = static_cast<float>(w[t]);
      b.targets[static_cast<size_t>(i * context_ + t)] = w[t + 1];
    }
  }
  return b;
}

namespace {

std::shared_ptr<image_dataset> load_split(const std::string& dir, const std::string& prefix, double mean,
                                          double stddev) {
  const std::string images_path = dir + "/" + prefix + "-images-idx3-ubyte.gz";
  const std::string labels_path = dir + "/" + prefix + "-labels-idx1-ubyte.gz";
  idx_images img = read_idx_images(images_path);
  std::vector<uint8_t> lab = read_idx_labels(labels_path);
  if (static_cast<int64_t>(lab.size()) != img.count)
    throw std::runtime_error(labels_path + ": " + std::to_string(lab.size()) + " labels for " +
                             std::to_string(img.count) + " images in " + images_path);
  std::vector<float> pixels(img.pixels.size());
  const float scale = static_cast<float>(1.0 / (255.0 * stddev));
  const float shift = static_cast<float>(mean / stddev);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<float>(img.pixels[i]) * scale - shift;
  std::vector<int32_t> labels(lab.begin(), lab.end());
  for (size_t i = 0; i < labels.size(); ++i)
    if (labels[i] > 9)
      throw std::runtime_error(labels_path + ": label " + std::to_string(labels[i]) + " at index " +
                               std::to_string(i) + " is not a class in 0..9");
  return std::make_shared<image_dataset>("fashion-mnist/" + prefix, img.rows * img.cols, std::move(pixels),
                                         std::move(labels));
}

}  // namespace

fashion_mnist load_fashion_mnist(const std::string& dir) {
  // The training set's pixel mean and standard deviation (on the [0, 1] scale), the usual
  // constants for this dataset; both splits use them.
  constexpr double mean = 0.2860, stddev = 0.3530;
  return {load_split(dir, "train", mean, stddev), load_split(dir, "t10k", mean, stddev)};
}

text_corpus load_text_corpus(const std::string& path, int64_t context, double validation_fraction) {
  namespace fs = std::filesystem;
  if (!(validation_fraction > 0.0 && validation_fraction < 1.0))
    throw std::invalid_argument("validation fraction must be in (0, 1)");
  std::vector<std::string> files;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    for (const auto& e : fs::directory_iterator(path))
      if (e.is_regular_file() && !e.path().has_extension()) files.push_back(e.path().string());
    std::sort(files.begin(), files.end());
    if (files.empty()) throw std::runtime_error(path + ": no extension-less text files in this directory");
  } else {
    files.push_back(path);
  }
  std::string text;
  for (const auto& f : files) {
    const auto bytes = read_maybe_gzip(f);
    text.append(bytes.begin(), bytes.end());
  }
  // Keep the vocabulary small and printable: tabs become spaces, other bytes outside
  // printable ASCII become '?'.
  for (char& c : text) {
    if (c == '\t') c = ' ';
    else if (c != '\n' && (c < 32 || c > 126)) c = '?';
  }
  if (static_cast<int64_t>(text.size()) < 4 * (context + 1))
    throw std::runtime_error(path + ": corpus has " + std::to_string(text.size()) +
                             " characters, too few for windows of " + std::to_string(context + 1));
  text_corpus c;
  bool seen[128] = {};
  for (char ch : text) seen[static_cast<unsigned char>(ch)] = true;
  int32_t id_of[128] = {};
  for (int ch = 0; ch < 128; ++ch)
    if (seen[ch]) {
      id_of[ch] = static_cast<int32_t>(c.vocab.size());
      c.vocab.push_back(static_cast<char>(ch));
    }
  std::vector<int32_t> tokens(text.size());
  for (size_t i = 0; i < text.size(); ++i) tokens[i] = id_of[static_cast<unsigned char>(text[i])];
  const auto split = static_cast<size_t>(static_cast<double>(tokens.size()) * (1.0 - validation_fraction));
  c.train = std::make_shared<text_dataset>("corpus/train", std::vector<int32_t>(tokens.begin(), tokens.begin() + split),
                                           context);
  c.validation =
      std::make_shared<text_dataset>("corpus/validation", std::vector<int32_t>(tokens.begin() + split, tokens.end()),
                                     context);
  return c;
}

}  // namespace troupe::storage

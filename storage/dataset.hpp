// Datasets as the data_loader sees them: a number of samples and a way to gather any subset
// into a batch. Two kinds: labelled images (Fashion-MNIST) and windows of a character corpus.
// Shuffling and sharding by rank live in sampler.hpp, not here.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/batch.hpp"

namespace troupe::storage {

class dataset {
 public:
  virtual ~dataset() = default;
  virtual std::string name() const = 0;
  virtual int64_t size() const = 0;  // samples
  // Gathers samples idx[0..n) in that order.
  virtual batch gather(const int64_t* idx, int64_t n) const = 0;
  batch gather(const std::vector<int64_t>& idx) const {
    return gather(idx.data(), static_cast<int64_t>(idx.size()));
  }
};

// Images as normalized float rows (count, rows*cols) and one class label each.
class image_dataset final : public dataset {
 public:
  image_dataset(std::string name, int64_t features, std::vector<float> pixels, std::vector<int32_t> labels);
  std::string name() const override { return name_; }
  int64_t size() const override { return static_cast<int64_t>(labels_.size()); }
  int64_t features() const { return features_; }
  batch gather(const int64_t* idx, int64_t n) const override;
  using dataset::gather;

 private:
  std::string name_;
  int64_t features_;
  std::vector<float> pixels_;
  std::vector<int32_t> labels_;
};

// Non-overlapping windows of context+1 tokens: inputs are the first `context`, targets the next.
class text_dataset final : public dataset {
 public:
  text_dataset(std::string name, std::vector<int32_t> tokens, int64_t context);
  std::string name() const override { return name_; }
  int64_t size() const override;
  int64_t context() const { return context_; }
  batch gather(const int64_t* idx, int64_t n) const override;
  using dataset::gather;

 private:
  std::string name_;
  std::vector<int32_t> tokens_;
  int64_t context_;
};

struct fashion_mnist {
  std::shared_ptr<image_dataset> train, test;
};

// Reads {train,t10k}-{images-idx3,labels-idx1}-ubyte.gz from dir (Debian: dataset-fashion-mnist).
// Pixels are scaled to [0, 1] and standardized with the training set's mean and std.
fashion_mnist load_fashion_mnist(const std::string& dir = "/usr/share/datasets/fashion-mnist");

struct text_corpus {
  std::string vocab;  // vocab[id] is the character of token id
  std::shared_ptr<text_dataset> train, validation;
};

// Concatenates the plain-text files in `path` (a file, or every extension-less file of a
// directory, sorted by name: Debian's fortunes package) and splits it: the last
// `validation_fraction` of the characters are the validation part.
text_corpus load_text_corpus(const std::string& path, int64_t context, double validation_fraction = 0.1);

}  // namespace troupe::storage

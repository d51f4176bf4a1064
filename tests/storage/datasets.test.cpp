// Dataset readers: real Fashion-MNIST loads with the expected sizes, and every kind of bad file
// is refused with an error that names the file and the problem.
#include <gtest/gtest.h>
#include <zlib.h>

#include <filesystem>
#include <functional>
#include <unistd.h>
#include <fstream>
#include <set>

#include "storage/dataset.hpp"
#include "storage/idx.hpp"
#include "storage/sampler.hpp"

namespace fs = std::filesystem;
using namespace troupe::storage;

namespace {

const char* kFashion = "/usr/share/datasets/fashion-mnist";

struct temp_dir {
  fs::path path;
  temp_dir() {
    path = fs::temp_directory_path() / ("troupe-storage-" + std::to_string(::getpid()) + "-" +
                                        std::to_string(reinterpret_cast<uintptr_t>(this)));
    fs::create_directories(path);
  }
  ~temp_dir() { fs::remove_all(path); }
};

void write_gz(const fs::path& p, const std::vector<uint8_t>& bytes) {
  gzFile f = gzopen(p.c_str(), "wb");
  gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(f);
}

std::vector<uint8_t> idx_header(uint32_t magic, std::vector<uint32_t> dims) {
  std::vector<uint8_t> b;
  auto put = [&](uint32_t v) {
    for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<uint8_t>(v >> s));
  };
  put(magic);
  for (auto d : dims) put(d);
  return b;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(FashionMnist, LoadsSixtyThousandTrainAndTenThousandTestImages) {
  if (!fs::exists(kFashion)) GTEST_SKIP() << "dataset-fashion-mnist not installed";
  auto data = load_fashion_mnist(kFashion);
  EXPECT_EQ(data.train->size(), 60000);
  EXPECT_EQ(data.test->size(), 10000);
  EXPECT_EQ(data.train->features(), 784);
  auto b = data.train->gather({0, 1, 2});
  EXPECT_EQ(b.inputs.shape(), (troupe::shape_t{3, 784}));
  // Known first labels of the training file: Ankle boot (9), T-shirt (0), T-shirt (0).
  EXPECT_EQ(b.targets, (std::vector<int32_t>{9, 0, 0}));
  // Standardized: the training-set mean of all pixels is close to zero.
  double sum = 0;
  auto all = data.train->gather([] { std::vector<int64_t> v(2000); for (int i = 0; i < 2000; ++i) v[i] = i; return v; }());
  for (int64_t i = 0; i < all.inputs.numel(); ++i) sum += all.inputs[i];
  EXPECT_NEAR(sum / static_cast<double>(all.inputs.numel()), 0.0, 0.05);
}

TEST(IdxReader, MissingFileIsNamed) {
  auto msg = error_of([] { read_idx_images("/nonexistent/dir/train-images.gz"); });
  EXPECT_NE(msg.find("/nonexistent/dir/train-images.gz"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cannot open"), std::string::npos) << msg;
}

TEST(IdxReader, WrongMagicIsRefused) {
  temp_dir d;
  auto bytes = idx_header(0x00000801u, {2});  // a label file given where images are expected
  bytes.insert(bytes.end(), {1, 2});
  write_gz(d.path / "x.gz", bytes);
  auto msg = error_of([&] { read_idx_images((d.path / "x.gz").string()); });
  EXPECT_NE(msg.find("wrong magic 0x00000801"), std::string::npos) << msg;
  EXPECT_NE(msg.find("x.gz"), std::string::npos) << msg;
}

TEST(IdxReader, TruncatedPayloadIsRefused) {
  temp_dir d;
  auto bytes = idx_header(0x00000803u, {2, 2, 2});
  bytes.insert(bytes.end(), {1, 2, 3});  // 3 of 8 pixels
  write_gz(d.path / "img.gz", bytes);
  auto msg = error_of([&] { read_idx_images((d.path / "img.gz").string()); });
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
  EXPECT_NE(msg.find("promises 8"), std::string::npos) << msg;
}

TEST(IdxReader, TruncatedHeaderIsRefused) {
  auto msg = error_of([] { parse_idx_labels({0, 0, 8}, "labels.gz"); });
  EXPECT_NE(msg.find("labels.gz: truncated IDX header"), std::string::npos) << msg;
}

TEST(IdxReader, CorruptGzipStreamIsRefused) {
  temp_dir d;
  auto bytes = idx_header(0x00000801u, {1000});
  bytes.resize(bytes.size() + 1000, 3);
  write_gz(d.path / "l.gz", bytes);
  // Cut the compressed file in half: the deflate stream ends early.
  auto size = fs::file_size(d.path / "l.gz");
  fs::resize_file(d.path / "l.gz", size / 2);
  auto msg = error_of([&] { read_idx_labels((d.path / "l.gz").string()); });
  EXPECT_NE(msg.find("l.gz"), std::string::npos) << msg;
  EXPECT_FALSE(msg.empty());
}

TEST(IdxReader, ValidLabelsRoundTrip) {
  temp_dir d;
  auto bytes = idx_header(0x00000801u, {3});
  bytes.insert(bytes.end(), {7, 0, 9});
  write_gz(d.path / "ok.gz", bytes);
  EXPECT_EQ(read_idx_labels((d.path / "ok.gz").string()), (std::vector<uint8_t>{7, 0, 9}));
}

TEST(FashionMnist, LabelCountMismatchNamesBothFiles) {
  temp_dir d;
  auto img = idx_header(0x00000803u, {2, 1, 1});
  img.insert(img.end(), {0, 255});
  auto lab = idx_header(0x00000801u, {3});
  lab.insert(lab.end(), {1, 2, 3});
  for (const char* split : {"train", "t10k"}) {
    write_gz(d.path / (std::string(split) + "-images-idx3-ubyte.gz"), img);
    write_gz(d.path / (std::string(split) + "-labels-idx1-ubyte.gz"), lab);
  }
  auto msg = error_of([&] { load_fashion_mnist(d.path.string()); });
  EXPECT_NE(msg.find("3 labels for 2 images"), std::string::npos) << msg;
}

TEST(TextCorpus, WindowsPredictTheNextCharacter) {
  temp_dir d;
  std::ofstream(d.path / "a") << "abcdefghijklmnopqrstuvwxyz0123456789";
  std::ofstream(d.path / "a.dat") << "binary index, ignored";
  auto c = load_text_corpus(d.path.string(), 4, 0.25);
  EXPECT_EQ(c.vocab.size(), 36u);
  auto b = c.train->gather({1});
  // window 1 covers characters 4..8: inputs "efgh", targets "fghi"
  for (int t = 0; t < 4; ++t) {
    EXPECT_EQ(c.vocab[static_cast<size_t>(b.inputs[t])], "efgh"[t]);
    EXPECT_EQ(c.vocab[static_cast<size_t>(b.targets[t])], "fghi"[t]);
  }
  EXPECT_EQ(c.train->size(), (27 - 1) / 4);
  EXPECT_EQ(c.validation->size(), (9 - 1) / 4);
}

TEST(TextCorpus, EmptyDirectoryIsRefused) {
  temp_dir d;
  auto msg = error_of([&] { load_text_corpus(d.path.string(), 8); });
  EXPECT_NE(msg.find("no extension-less text files"), std::string::npos) << msg;
}

TEST(Sampler, EpochIsAPermutationAndRanksPartitionEachBatch) {
  sampler s(1000, 100, 42);
  EXPECT_EQ(s.batches_per_epoch(), 10);
  std::set<int64_t> seen;
  for (int64_t b = 0; b < 10; ++b) {
    std::vector<int64_t> whole = s.indices(0, b);
    std::vector<int64_t> joined;
    for (int r = 0; r < 3; ++r) {
      auto part = s.indices(0, b, r, 3);
      joined.insert(joined.end(), part.begin(), part.end());
    }
    EXPECT_EQ(joined, whole);
    seen.insert(whole.begin(), whole.end());
  }
  EXPECT_EQ(seen.size(), 1000u);
  EXPECT_NE(s.indices(0, 0), s.indices(1, 0));  // reshuffled each epoch
  EXPECT_EQ(sampler(1000, 100, 42).indices(3, 2), s.indices(3, 2));  // reproducible from the seed
}

TEST(Sampler, DropsTheIncompleteLastBatch) {
  sampler s(250, 100, 1);
  EXPECT_EQ(s.batches_per_epoch(), 2);
  EXPECT_THROW(s.indices(0, 2), std::out_of_range);
  EXPECT_THROW(sampler(50, 100, 1), std::invalid_argument);
}

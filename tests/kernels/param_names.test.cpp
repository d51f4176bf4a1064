// named_params: unique PyTorch-style names whose offsets tile the flat parameter vector of the
// model's layer_stack exactly, with counts that are their shapes' products, and the names and
// shapes the PyTorch oracle's modules (tests/oracle/pytorch_oracle.py) expect.
#include "kernels/param_names.hpp"

#include <gtest/gtest.h>

#include <map>
#include <set>

#include "kernels/layer_stack.hpp"
#include "tests/oracle/oracle_models.hpp"

namespace troupe {
namespace {

// The names' contract, and their shapes by name.
std::map<std::string, shape_t> check_tiling(const model_spec& spec) {
  const auto params = named_params(spec);
  const layer_stack stack(build_layers(spec), 0, 1);
  std::map<std::string, shape_t> shapes;
  int64_t next = 0;
  for (const auto& p : params) {
    EXPECT_TRUE(shapes.emplace(p.name, p.shape).second) << p.name << " twice";
    EXPECT_EQ(p.offset, next) << p.name;
    EXPECT_EQ(p.count, numel_of(p.shape)) << p.name;
    EXPECT_GT(p.count, 0) << p.name;
    next = p.offset + p.count;
  }
  EXPECT_EQ(next, stack.num_params());
  return shapes;
}

TEST(NamedParams, MlpNamesAreSequentialIndicesOfItsLinearsTilingTheFlatVector) {
  const auto shapes = check_tiling(test::oracle_mlp());
  const std::map<std::string, shape_t> expected{
      {"layers.0.weight", {16, 12}}, {"layers.0.bias", {16}}, {"layers.2.weight", {8, 16}},
      {"layers.2.bias", {8}},        {"layers.4.weight", {5, 8}}, {"layers.4.bias", {5}}};
  EXPECT_EQ(shapes, expected);
  EXPECT_EQ(named_params(test::oracle_mlp()).front().name, "layers.0.weight");
}

TEST(NamedParams, GptNamesFollowTheModuleTreeTilingTheFlatVector) {
  const model_spec spec = test::oracle_gpt();
  const auto shapes = check_tiling(spec);
  const int64_t C = 16, V = 11;
  EXPECT_EQ(shapes.size(), 2u + 2u * 12u + 4u);
  EXPECT_EQ(shapes.at("tok_emb.weight"), (shape_t{V, C}));
  EXPECT_EQ(shapes.at("pos_emb.weight"), (shape_t{8, C}));
  EXPECT_EQ(shapes.at("blocks.1.ln1.weight"), (shape_t{C}));
  EXPECT_EQ(shapes.at("blocks.1.attn.qkv.weight"), (shape_t{3 * C, C}));
  EXPECT_EQ(shapes.at("blocks.1.attn.qkv.bias"), (shape_t{3 * C}));
  EXPECT_EQ(shapes.at("blocks.0.attn.proj.weight"), (shape_t{C, C}));
  EXPECT_EQ(shapes.at("blocks.0.mlp.fc.weight"), (shape_t{4 * C, C}));
  EXPECT_EQ(shapes.at("blocks.0.mlp.proj.weight"), (shape_t{C, 4 * C}));
  EXPECT_EQ(shapes.at("ln_f.bias"), (shape_t{C}));
  EXPECT_EQ(shapes.at("head.weight"), (shape_t{V, C}));
  EXPECT_EQ(shapes.at("head.bias"), (shape_t{V}));
  const auto params = named_params(spec);
  EXPECT_EQ(params.front().name, "tok_emb.weight");
  EXPECT_EQ(params.back().name, "head.bias");
}

TEST(NamedParams, GptWithoutAVocabularyIsRefused) {
  model_spec spec = test::oracle_gpt();
  spec.vocab = 0;
  EXPECT_THROW(named_params(spec), std::invalid_argument);
}

// param_count (what a checkpoint's manifest is checked against) is the built model's count for
// MLPs with and without hidden layers and GPTs of several sizes, and refuses a spec whose count
// does not fit, which building would try to allocate.
TEST(ParamCount, EqualsTheBuiltModelsCountAndRefusesAnOverflowingSpec) {
  std::vector<model_spec> specs;
  specs.push_back(model_spec{});
  model_spec flat;
  flat.hidden = {};
  specs.push_back(flat);
  specs.push_back(test::oracle_gpt());
  model_spec gpt = test::oracle_gpt();
  gpt.blocks = 3, gpt.channels = 24, gpt.heads = 3, gpt.context = 11, gpt.vocab = 53;
  specs.push_back(gpt);
  for (const model_spec& s : specs) EXPECT_EQ(param_count(s), layer_stack(build_layers(s), 0, 1).num_params()) << describe(s);
  model_spec huge = test::oracle_gpt();
  huge.blocks = int64_t{1} << 40;
  huge.channels = huge.heads = int64_t{1} << 20;
  EXPECT_THROW(param_count(huge), std::invalid_argument);
  huge.heads = 0;
  EXPECT_THROW(param_count(huge), std::invalid_argument);
}

}  // namespace
}  // namespace troupe

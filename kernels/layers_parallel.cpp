// Column- and row-parallel linear over the device's ops (device_ops.hpp), with f and g as the only
// communication.
#include "kernels/layers_parallel.hpp"

#include <stdexcept>
#include <utility>

#include "kernels/layers_dense.hpp"
#include "kernels/device_ops.hpp"

namespace troupe {

namespace tp {
void copy_to_backward(tp_group* g, tensor& dx) {
  if (tp_size(g) > 1 && !dx.empty()) g->all_reduce_sum(f32_out(dx), dx.numel());
}
void reduce_from_forward(tp_group* g, tensor& y) {
  if (tp_size(g) > 1) g->all_reduce_sum(f32_out(y), y.numel());
}
}  // namespace tp

namespace sp {
tensor gather_rows(tp_group* g, const tensor& share) {
  const int tp = tp_size(g);
  shape_t shape = share.shape();
  shape.at(0) *= tp;
  const device_ops& k = ops_on(share);
  tensor full = k.empty(shape);
  const shard_range mine = shard_of(full.numel(), tp, tp_rank(g));
  k.copy_floats(f32_out(full) + mine.begin, f32(share), share.numel());
  g->all_gather(f32_out(full), full.numel());
  return full;
}

tensor scatter_rows(tp_group* g, const tensor& full) {
  const int tp = tp_size(g);
  if (full.rank() < 1 || full.size(0) % tp != 0)
    throw std::invalid_argument("sequence parallelism: a microbatch of " + std::to_string(full.rank() ? full.size(0) : 0) +
                                " sequences does not split over tp " + std::to_string(tp));
  const device_ops& k = ops_on(full);
  tensor sums = k.empty(full.shape());
  k.copy(sums, full);
  g->reduce_scatter_sum(f32_out(sums), sums.numel());
  shape_t shape = full.shape();
  shape.at(0) /= tp;
  const shard_range mine = shard_of(full.numel(), tp, tp_rank(g));
  tensor share = k.empty(shape);
  k.copy_floats(f32_out(share), f32(sums) + mine.begin, mine.count);
  return share;
}

void add_summed(tp_group* g, float* grads, tensor& partial) {
  g->all_reduce_sum(f32_out(partial), partial.numel());
  ops_on(partial).add_into(grads, f32(partial), partial.numel());
}
}  // namespace sp

void gather_runs(float* shard, const float* full, const std::vector<param_run>& runs) {
  for (const param_run& r : runs) shard = std::copy(full + r.offset, full + r.offset + r.count, shard);
}

void scatter_runs(float* full, const float* shard, const std::vector<param_run>& runs) {
  for (const param_run& r : runs) {
    std::copy(shard, shard + r.count, full + r.offset);
    shard += r.count;
  }
}

namespace {
int64_t rows_of(const tensor& x, int64_t features, const std::string& who, const char* what) {
  if (x.rank() < 1 || x.size(-1) != features)
    throw std::invalid_argument(who + ": " + what + " has shape " + to_string(x.shape()) +
                                ", expected last dimension " + std::to_string(features));
  return x.numel() / features;
}

int64_t total_rows(const std::vector<shard_range>& rows, int64_t full_out) {
  int64_t n = 0;
  for (const shard_range& r : rows) {
    if (r.begin < 0 || r.count < 0 || r.end() > full_out)
      throw std::invalid_argument("column_parallel_linear: rows [" + std::to_string(r.begin) + ", " +
                                  std::to_string(r.end()) + ") outside the " + std::to_string(full_out) +
                                  " output features");
    n += r.count;
  }
  return n;
}
}  // namespace

std::vector<param_spec> parallel_linear::param_specs() const {
  std::vector<param_spec> specs{{"weight", {out_, in_}}};
  if (bias_) specs.push_back({"bias", {out_}});
  return specs;
}

void parallel_linear::init_from_full(float* params, std::mt19937_64& rng) const {
  std::vector<float> full(static_cast<size_t>(full_params()));
  linear(full_in_, full_out_, bias_).init(full.data(), rng);
  gather_runs(params, full.data(), full_runs());
}

// ---- column-parallel ----

column_parallel_linear::column_parallel_linear(int64_t in, int64_t full_out, std::vector<shard_range> rows,
                                               tp_group* g, bool bias)
    : parallel_linear(in, full_out, in, total_rows(rows, full_out), bias, g), rows_(std::move(rows)) {}

std::vector<param_run> column_parallel_linear::full_runs() const {
  std::vector<param_run> runs;
  for (const shard_range& r : rows_) runs.push_back({r.begin * in_, r.count * in_});
  if (bias_)
    for (const shard_range& r : rows_) runs.push_back({full_out_ * in_ + r.begin, r.count});
  return runs;
}

tensor column_parallel_linear::forward(const tensor& share, saved_activations& saved) const {
  return forward_with(share, saved, bias());
}

tensor column_parallel_linear::forward_unbiased(const tensor& share, saved_activations& saved) const {
  return forward_with(share, saved, nullptr);
}

tensor column_parallel_linear::forward_with(const tensor& share, saved_activations& saved, const float* b) const {
  const tensor x = sequence_parallel_ ? sp::gather_rows(group_, share) : share;
  const int64_t n = rows_of(x, in_, kind(), "input");
  shape_t shape = x.shape();
  shape.back() = out_;
  const device_ops& k = ops_on(x);
  tensor y = k.empty(shape);
  tensor kept = gemm::forward(matmul_, k, f32_out(y), x, params_, b, n, in_, out_);
  // Under sequence parallelism only the share (fp32): backward_weight gathers it again.
  saved.tensors = {sequence_parallel_ ? share : std::move(kept)};
  return y;
}

tensor column_parallel_linear::backward_input(const tensor& dy, saved_activations& saved) const {
  const int64_t n = rows_of(dy, out_, kind(), "output gradient");
  shape_t shape = saved.tensors.at(0).shape();
  if (sequence_parallel_) shape.at(0) *= tp_size(group_);
  const device_ops& k = ops_on(dy);
  tensor dx = k.empty(shape);
  gemm::backward_input(matmul_, k, f32_out(dx), dy, params_, n, in_, out_);
  if (sequence_parallel_) return sp::scatter_rows(group_, dx);  // instead of f, never both
  tp::copy_to_backward(group_, dx);
  return dx;
}

void column_parallel_linear::backward_weight(const tensor& dy, saved_activations& saved) {
  const int64_t n = rows_of(dy, out_, kind(), "output gradient");
  const tensor& share = saved.tensors.at(0);
  const tensor x = sequence_parallel_ ? sp::gather_rows(group_, share) : share;
  gemm::backward_weight(matmul_, ops_on(dy), grads_, bias_grad(), dy, x, n, in_, out_);
}

// ---- row-parallel ----

row_parallel_linear::row_parallel_linear(int64_t full_in, int64_t out, shard_range cols, tp_group* g, bool bias)
    : parallel_linear(full_in, out, cols.count, out, bias, g), cols_(cols) {
  if (cols.begin < 0 || cols.count <= 0 || cols.end() > full_in)
    throw std::invalid_argument("row_parallel_linear: columns [" + std::to_string(cols.begin) + ", " +
                                std::to_string(cols.end()) + ") outside the " + std::to_string(full_in) +
                                " input features");
}

std::vector<param_run> row_parallel_linear::full_runs() const {
  std::vector<param_run> runs;
  for (int64_t o = 0; o < out_; ++o) runs.push_back({o * full_in_ + cols_.begin, cols_.count});
  if (bias_) runs.push_back({out_ * full_in_, out_});
  return runs;
}

tensor row_parallel_linear::forward(const tensor& x, saved_activations& saved) const {
  const int64_t n = rows_of(x, in_, kind(), "input");
  shape_t shape = x.shape();
  shape.back() = out_;
  const device_ops& k = ops_on(x);
  tensor y = k.empty(shape);
  if (tp_size(group_) == 1) {  // the plain linear's arithmetic, bias inside the GEMM
    saved.tensors = {gemm::forward(matmul_, k, f32_out(y), x, params_, bias(), n, in_, out_)};
    return y;
  }
  // The bias belongs to the sum, not to each partial: added once, after g.
  saved.tensors = {gemm::forward(matmul_, k, f32_out(y), x, params_, nullptr, n, in_, out_)};
  if (sequence_parallel_) y = sp::scatter_rows(group_, y);  // instead of g
  else tp::reduce_from_forward(group_, y);
  if (const float* b = bias()) k.add_bias(f32_out(y), b, y.numel() / out_, out_);
  return y;
}

tensor row_parallel_linear::backward_input(const tensor& dy_share, saved_activations& saved) const {
  // Under sequence parallelism dy is this rank's share of the tokens: gathered (the reduce-
  // scatter's backward), and kept for backward_weight.
  if (sequence_parallel_ && saved.tensors.size() == 1) saved.tensors.push_back(sp::gather_rows(group_, dy_share));
  const tensor& dy = sequence_parallel_ ? saved.tensors.at(1) : dy_share;
  const int64_t n = rows_of(dy, out_, kind(), "output gradient");
  const device_ops& k = ops_on(dy);
  tensor dx = k.empty(saved.tensors.at(0).shape());
  gemm::backward_input(matmul_, k, f32_out(dx), dy, params_, n, in_, out_);
  return dx;  // g's backward is the identity: each rank keeps the gradient of its own columns
}

void row_parallel_linear::backward_weight(const tensor& dy_share, saved_activations& saved) {
  if (!sequence_parallel_) {
    const int64_t n = rows_of(dy_share, out_, kind(), "output gradient");
    gemm::backward_weight(matmul_, ops_on(dy_share), grads_, bias_grad(), dy_share, saved.tensors.at(0), n, in_, out_);
    return;
  }
  if (saved.tensors.size() == 1) saved.tensors.push_back(sp::gather_rows(group_, dy_share));
  const tensor& dy = saved.tensors.at(1);
  gemm::backward_weight(matmul_, ops_on(dy), grads_, nullptr, dy, saved.tensors.at(0),
                        rows_of(dy, out_, kind(), "output gradient"), in_, out_);
  if (!bias_) return;
  const device_ops& k = ops_on(dy_share);
  tensor db = k.zeros({out_});  // over this rank's tokens only
  k.bias_backward(f32_out(db), f32(dy_share), rows_of(dy_share, out_, kind(), "output gradient"), out_);
  sp::add_summed(group_, bias_grad(), db);
}

}  // namespace troupe

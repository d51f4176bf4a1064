// Resharding as a pure function: which floats of which shard files fill a reader's ranges of the
// global layout. A checkpoint's shard files each hold runs of the global arrays (the unsplit
// model's flat parameters in layer order, and the optimizer's state in the same layout); a new
// mesh, ZeRO stage or tensor-parallel degree only changes which ranges a reader wants. No I/O.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace troupe::storage {

// Floats [local, local + count) of a buffer hold global floats [global, global + count).
struct value_run {
  int64_t local = 0;
  int64_t global = 0;
  int64_t count = 0;
};
inline bool operator==(const value_run& a, const value_run& b) {
  return a.local == b.local && a.global == b.global && a.count == b.count;
}

// Copy `count` floats from float `from` of file `file`'s section into float `to` of the reader's buffer.
struct read_item {
  size_t file = 0;
  int64_t from = 0;
  int64_t to = 0;
  int64_t count = 0;
};
inline bool operator==(const read_item& a, const read_item& b) {
  return a.file == b.file && a.from == b.from && a.to == b.to && a.count == b.count;
}

// saved[f]: the runs of file f. Every float of every wanted run is read from the first file (in
// file order) that holds it: files that overlap hold the same values (a tensor-parallel rank's
// replicated layernorm), so which one serves is a choice, and the first makes it the same on
// every run. Items come out in wanted order, adjacent pieces of one file merged. Sorted intervals
// make it O((saved + wanted + items) log saved). Throws std::invalid_argument naming the first
// global range no file holds, and for a run with a negative count or offset.
std::vector<read_item> plan_reads(const std::vector<std::vector<value_run>>& saved, const std::vector<value_run>& wanted);

// Runs over the same buffer merged where one continues the other in both spaces; sorted by local.
std::vector<value_run> merge_runs(std::vector<value_run> runs);

// a maps X to Y (local: X, global: Y), b maps Y to Z: the runs that map X to Z, sorted by X.
// Floats of a that b does not map are left out.
std::vector<value_run> compose_runs(const std::vector<value_run>& a, std::vector<value_run> b);

// Distinct global floats the runs cover (overlaps counted once): a checkpoint whose files cover
// fewer than its arrays hold is partial.
int64_t covered_floats(std::vector<value_run> runs);

}  // namespace troupe::storage

// param_fetcher: the gather thread of a ZeRO-3 stage (param_fetcher.hpp).
#include "actors/stage/param_fetcher.hpp"

#include <algorithm>
#include <stdexcept>
#include <utility>

namespace troupe {

param_fetcher::param_fetcher(std::shared_ptr<tp_group> group, int depth, std::shared_ptr<storage::segment_file> file,
                             place_fn place)
    : group_(std::move(group)),
      depth_(static_cast<size_t>(std::max(1, depth))),
      file_(std::move(file)),
      place_(std::move(place)),
      worker_([this] { run(); }) {}

param_fetcher::~param_fetcher() {
  stop("the stage ended");
  worker_.join();
}

void param_fetcher::keep(tensor segments) {
  if (!file_) throw std::logic_error("param_fetcher: segments to keep, but no segment file");
  std::lock_guard<std::mutex> lock(mu_);
  to_keep_ = std::move(segments);
  cv_.notify_all();
}

void param_fetcher::begin_step(std::vector<request> order) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!todo_.empty() || !ready_.empty())
    throw std::logic_error("param_fetcher: a step began with " + std::to_string(todo_.size() + ready_.size()) +
                           " units of the previous one never used");
  for (auto& r : order) {
    expected_.emplace_back(r.chunk, r.unit);
    todo_.push_back(std::move(r));
  }
  cv_.notify_all();
}

tensor param_fetcher::take(int chunk, size_t unit) {
  std::unique_lock<std::mutex> lock(mu_);
  if (expected_.empty() || expected_.front() != std::make_pair(chunk, unit))
    throw std::logic_error("param_fetcher: unit " + std::to_string(unit) + " of chunk " + std::to_string(chunk) +
                           " asked for out of the schedule's order" +
                           (expected_.empty() ? std::string(" (none expected)")
                                              : " (expected unit " + std::to_string(expected_.front().second) +
                                                    " of chunk " + std::to_string(expected_.front().first) + ")"));
  cv_.wait(lock, [&] { return !ready_.empty() || !error_.empty(); });
  if (!error_.empty()) throw std::runtime_error(error_);
  tensor out = std::move(ready_.front().second);
  ready_.pop_front();
  expected_.pop_front();
  cv_.notify_all();  // room for the next gather
  return out;
}

void param_fetcher::stop(const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  stopping_ = true;
  if (error_.empty()) error_ = why;
  cv_.notify_all();
}

void param_fetcher::run() {
  for (;;) {
    request r;
    tensor keep;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !to_keep_.empty() || (!todo_.empty() && ready_.size() < depth_); });
      if (stopping_) return;
      if (!to_keep_.empty()) {
        keep = std::move(to_keep_);
        to_keep_ = tensor();
      } else {
        r = std::move(todo_.front());
        todo_.pop_front();
      }
    }
    tensor full;
    try {
      if (!keep.empty()) {  // the new segments go to the file before any unit is read from it
        file_->write_all(std::as_const(keep).data(), keep.numel());
        continue;
      }
      full = tensor::uninitialized({r.count});
      const shard_range mine = shard_of(r.count, group_->size(), group_->rank());
      if (file_) {
        if (mine.count > 0) file_->read(r.at, full.data() + mine.begin, mine.count);
      } else {
        const float* own = std::as_const(r.source).data() + r.at;
        std::copy(own, own + mine.count, full.data() + mine.begin);
        r.source = tensor();  // the segments may be updated in place once every unit has them
      }
      group_->all_gather(full.data(), r.count);
      full.freeze();
      if (place_) full = place_(std::move(full));
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lock(mu_);
      error_ = keep.empty() ? std::string("the all-gather of parameter unit ") + std::to_string(r.unit) + " of chunk " +
                                  std::to_string(r.chunk) + " failed: " + e.what()
                            : std::string("writing the parameter segments to their file failed: ") + e.what();
      cv_.notify_all();
      return;
    }
    std::lock_guard<std::mutex> lock(mu_);
    ready_.emplace_back(std::move(r), std::move(full));
    cv_.notify_all();
  }
}

}  // namespace troupe

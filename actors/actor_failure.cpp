// actor_failure: exceptions become sentences, and sentences travel as the context of a caf::error.
#include "actors/actor_failure.hpp"

#include <new>
#include <stdexcept>

namespace troupe {

std::string describe_failure(const std::exception_ptr& e, const std::string& where, int64_t step) {
  const std::string during = step >= 0 ? " during step " + std::to_string(step) : std::string();
  try {
    std::rethrow_exception(e);
  } catch (const std::bad_alloc&) {
    return "out of memory in " + where + during;
  } catch (const std::exception& x) {
    return where + during + ": " + x.what();
  } catch (...) {
    return where + during + ": an exception of unknown type";
  }
}

caf::error failure_error(const std::string& what) { return caf::make_error(caf::sec::runtime_error, what); }

std::string describe_exit(caf::actor_system& sys, const caf::error& reason) {
  // A normal exit carries no error, and CAF 0.17's context() reads through its null data.
  if (!reason) return "it stopped without an error";
  const caf::message& context = reason.context();
  if (reason.category() == caf::atom("system") && context.match_elements<std::string>())
    return context.get_as<std::string>(0);
  return sys.render(reason);
}

}  // namespace troupe

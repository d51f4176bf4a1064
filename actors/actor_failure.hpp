// How an error inside an actor reaches the user. An exception thrown by an actor's handler ends
// the actor with a caf::error whose context is one sentence naming the actor, the step and the
// cause ("out of memory in stage during step 17"); describe_exit turns the exit reason a monitor
// receives back into that sentence. CAF 0.17's default handler keeps only sec::runtime_error.
// It decides nothing about what the job does next: the coordinator does.
#pragma once

#include <caf/all.hpp>

#include <cstdint>
#include <exception>
#include <string>
#include <utility>

namespace troupe {

// "out of memory in WHERE during step S" for std::bad_alloc, "WHERE during step S: what()"
// for any other exception; a negative step leaves "during step S" out.
std::string describe_failure(const std::exception_ptr& e, const std::string& where, int64_t step);

// sec::runtime_error carrying `what` as its context, so that it survives a process boundary.
caf::error failure_error(const std::string& what);

// The sentence a failure_error carries, CAF's rendering of any other exit reason, and "it stopped
// without an error" for a normal exit (a worker hub that gave up on a silent rank 0 ends so).
std::string describe_exit(caf::actor_system& sys, const caf::error& reason);

// Ends `self` with failure_error(describe_failure(...)) when a handler throws. `where` is called
// then, and returns the actor's name and the step it was working on (std::pair<string, int64_t>).
template <class Actor, class Where>
void name_failures(Actor* self, Where where) {
  self->set_exception_handler([where](caf::scheduled_actor*, std::exception_ptr& e) -> caf::error {
    const std::pair<std::string, int64_t> at = where();
    return failure_error(describe_failure(e, at.first, at.second));
  });
}

}  // namespace troupe

// actor_failure: an exception in an actor becomes a sentence that names the actor and the step
// ("out of memory in stage during step 17"), and a monitor reads it back from the exit reason.
#include <gtest/gtest.h>

#include <new>
#include <stdexcept>

#include "actors/actor_failure.hpp"

TEST(ActorFailure, OutOfMemoryNamesTheActorAndTheStep) {
  auto e = std::make_exception_ptr(std::bad_alloc());
  EXPECT_EQ(troupe::describe_failure(e, "stage", 17), "out of memory in stage during step 17");
  auto r = std::make_exception_ptr(std::runtime_error("metrics.jsonl: No space left on device"));
  EXPECT_EQ(troupe::describe_failure(r, "coordinator", -1), "coordinator: metrics.jsonl: No space left on device");
}

TEST(ActorFailure, TheSentenceIsWhatAMonitorReadsFromTheExitReason) {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  EXPECT_EQ(troupe::describe_exit(sys, troupe::failure_error("out of memory in stage during step 3")),
            "out of memory in stage during step 3");
  EXPECT_EQ(troupe::describe_exit(sys, caf::exit_reason::user_shutdown), sys.render(caf::exit_reason::user_shutdown));
  // An actor whose handler throws ends with the sentence as its exit reason.
  auto a = sys.spawn([](caf::event_based_actor* self) -> caf::behavior {
    troupe::name_failures(self, [] { return std::make_pair(std::string("test actor"), int64_t{5}); });
    return {[](int) { throw std::bad_alloc(); }};
  });
  caf::scoped_actor self{sys};
  self->monitor(a);
  self->send(a, 1);
  std::string why;
  self->receive([&](caf::down_msg& dm) { why = troupe::describe_exit(sys, dm.reason); });
  EXPECT_EQ(why, "out of memory in test actor during step 5");
}

// A worker hub that gave up on a paused rank 0 quits normally: its down message carries no error,
// and rank 0's job hub, resumed, describes it (this read through a null pointer and crashed).
TEST(ActorFailure, ANormalExitIsDescribedWithoutReadingItsAbsentContext) {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  EXPECT_EQ(troupe::describe_exit(sys, caf::error{}), "it stopped without an error");
  auto a = sys.spawn([](caf::event_based_actor* self) -> caf::behavior { return {[self](int) { self->quit(); }}; });
  caf::scoped_actor self{sys};
  self->monitor(a);
  self->send(a, 1);
  std::string why;
  self->receive([&](caf::down_msg& dm) { why = troupe::describe_exit(sys, dm.reason); });
  EXPECT_EQ(why, "it stopped without an error");
}

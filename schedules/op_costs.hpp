// op_costs: what one device's ops take, the interface of the two models that price them: the
// published hardware of a cluster (plan/time_model.hpp's published_device, for `troupe plan`)
// and this machine as calibrate_machine() measured it (actors/plan/job_forecast.hpp's
// machine_costs, for `troupe train --forecast`). Per op, under simulate()'s cost_model, which is
// per chunk: it knows no layer and no schedule. Header only.
#pragma once

#include "kernels/dtype.hpp"

namespace troupe::sched {

class op_costs {
 public:
  virtual ~op_costs() = default;
  // Seconds of `batch` GEMMs run at once (attention's per-head products), each (m x k) * (k x n)
  // with operands of dtype d.
  virtual double gemm_seconds(dtype d, double m, double n, double k, double batch) const = 0;

 protected:
  op_costs() = default;
  op_costs(const op_costs&) = default;
  op_costs& operator=(const op_costs&) = default;
};

}  // namespace troupe::sched

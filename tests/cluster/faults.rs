//! The operator under faults, and its answers to failure. The tools that make
//! them: admission policies and webhooks that deny or rewrite its writes
//! (`admission_fakes`) and a proxy that hangs, lags or cuts its API requests
//! (`api_proxy`). Errors reach status (`failures`), a rejected apply stalls
//! without a hot loop (`stall`), retries start over for new inputs
//! (`retry_count`) and follow what the cluster says (`status_memory`), a crash
//! between apply and status is recovered (`recovery`), an apply the watch
//! has not delivered is not sent again (`own_writes`); the operator killed
//! mid-rollout (`chaos`), the control plane's own faults (`plane_faults`),
//! throttling by API Priority and Fairness (`throttling`), and generated
//! fleets and edits under perturbation (`perturb`).

pub(crate) mod admission_fakes;
pub(crate) mod api_proxy;
mod chaos;
mod failures;
mod own_writes;
mod perturb;
mod plane_faults;
mod recovery;
mod retry_count;
pub(crate) mod stall;
mod status_memory;
mod throttling;

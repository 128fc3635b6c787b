// What the public API (include/lenet/lenet.h) and the Python binding share below the
// public header: an Executor made from EngineOptions, with the options checked once,
// here, so that both say the same thing about a bad one.
#pragma once

#include <memory>

#include "../../include/lenet/lenet.h"
#include "../runtime/executor.h"

namespace lenet::api {

// `options.threads` must be 1..1024 here (0 is resolved by the caller).
std::unique_ptr<Executor> executor_open(std::shared_ptr<const Network> network, const EngineOptions& options);

}  // namespace lenet::api

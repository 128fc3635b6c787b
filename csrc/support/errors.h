// The core's exceptions are the public API's (include/lenet/errors.h, installed with
// the package): one definition, so that what the core throws is what a C++ program
// catches.
#pragma once

#include "../../include/lenet/errors.h"

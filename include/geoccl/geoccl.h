// Umbrella header.
#pragma once

#include "geoccl/auto_codec.h"
#include "geoccl/blob.h"
#include "geoccl/bucketer.h"
#include "geoccl/communicator.h"
#include "geoccl/compression.h"
#include "geoccl/config.h"
#include "geoccl/error.h"
#include "geoccl/store.h"
#include "geoccl/types.h"
#include "geoccl/weighted.h"
#include "geoccl/work.h"

// ordo/ordo.hpp - everything of ordo's core in one include.
#pragma once

#include "ordo/context.hpp"
#include "ordo/engine.hpp"
#include "ordo/error.hpp"
#include "ordo/graph.hpp"
#include "ordo/on_complete.hpp"
#include "ordo/options.hpp"
#include "ordo/var.hpp"

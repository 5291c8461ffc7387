/* mgraph: the whole public API. */
#ifndef MGRAPH_MGRAPH_H
#define MGRAPH_MGRAPH_H

#include "mgraph/error.h"
#include "mgraph/graph.h"
#include "mgraph/ops.h"
#include "mgraph/moe.h"
#include "mgraph/train.h"
#include "mgraph/step.h"
#include "mgraph/rng.h"
#include "mgraph/memplan.h"
#include "mgraph/dot.h"
#include "mgraph/exec.h"
#include "mgraph/engine.h"
#include "mgraph/comm.h"
#include "mgraph/plan.h"
#include "mgraph/model.h"
#include "mgraph/tokenizer.h"
#include "mgraph/dataset.h"
#include "mgraph/outfile.h"
#include "mgraph/recompute.h"
#include "mgraph/trainer.h"
#include "mgraph/generate.h"

#endif

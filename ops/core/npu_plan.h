// The executor's plans of a validated engine, made once at load (npu_engine.cc's decoder):
// which instructions run fused, and how run_engine (npu_exec.h) splits a batch over threads.
// They change no bits, only what runs where.
#pragma once

#include "core/npu_engine.h"

namespace ratelnn {
namespace npu {

// The executor plan of a validated engine, made once at load (docs/architecture.md §7): a
// CONV2D on the GEMM path whose output only the ADD after it reads, the ADD's other operand
// being computed earlier, runs that ADD (and the REQUANT after it, when it alone reads the
// sum) in its epilogue: Instruction::fused_add / fused_requant / fused.  Same bits as
// running them one by one; the engine format is unchanged.  Also the narrow plan of
// each ADD/SUB of 8-bit codes with the REQUANT run in its pass (Instruction::narrow,
// npu_add_narrow.h), checked on every code pair.  And a PAD of the spatial dims that only the
// CONV2D / MAX_POOL after it reads joins that instruction's padding (Instruction::fused on
// the PAD; the instruction then reads the PAD's input), where that gives the same bits.
void plan_fusions(Engine& e);

// The batch schedule of a validated engine (docs/architecture.md §7, "Batch split"):
// Engine::split_by_sample when its constants take no more bytes than one sample's
// activations (every thread then reads the weights once per sample but keeps the sample's
// activations in its cache).  run_engine splits a batch of at least `num_threads` samples
// by sample when set (RATELNN_BATCH_SPLIT=layers|samples forces either), else each
// instruction's work over the threads.
void plan_batch_split(Engine& e);

// Whether run_engine splits a batch of at least as many samples as threads by sample:
// RATELNN_BATCH_SPLIT "layers" or "samples" force a schedule; unset, "" or "auto" leave it to
// the engine's plan (Engine::split_by_sample); any other value throws EngineError.
bool batch_split_by_sample(const Engine& e);

}  // namespace npu
}  // namespace ratelnn

// debugging/catalog_cases.cu — the debugging track's catalog as a lesson: "debug", folder
// debugging/, and its cases, each a further exercise (Lesson::more_exercises): the learner's
// file with the broken kernel, its hints, the op it computes (catalog_ops.cu), the tool that
// catches the bug ("" for the checks), and what the learner sees. `klab debug list` shows
// them in this order.
#include "klab/op.hpp"

namespace debugging {

KLAB_REGISTER(klab::register_lesson(
    {.id = "debug",
     .slug = "debugging",
     .title = "Debugging: the broken-kernel catalog (klab debug list)",
     .more_exercises =
         {{.id = "debug/missing_barrier",
           .op = "debug_row_sum",
           .file = "missing_barrier.cu",
           .hints = "missing_barrier.md",
           .title = "a shared-memory reduction without its barriers",
           .tool = "racecheck",
           .symptom = "row sums may be wrong on some rows of the longer shapes, not the same ones run to run, "
                      "or right by luck"},
          {.id = "debug/missing_mask",
           .op = "debug_scale",
           .file = "missing_mask.cu",
           .hints = "missing_mask.md",
           .title = "a kernel without its bounds check",
           .tool = "memcheck",
           .symptom = "the checks may pass: the writes past the array's end land in memory they need never read"},
          {.id = "debug/unzeroed_workspace",
           .op = "debug_split_sum",
           .file = "unzeroed_workspace.cu",
           .hints = "unzeroed_workspace.md",
           .title = "a sum accumulated into a workspace never zeroed",
           .tool = "initcheck",
           .symptom = "row sums that can be right the first time a shape runs and wrong after (twice the sum, or "
                      "more), or wrong from the start"},
          {.id = "debug/unstable_softmax",
           .op = "debug_softmax",
           .file = "unstable_softmax.cu",
           .hints = "unstable_softmax.md",
           .title = "a softmax without the row's max",
           .tool = "",
           .symptom = "FAIL with NaN in nearly every row: e^x overflowed to inf, and inf / inf is NaN"},
          {.id = "debug/one_pass_variance",
           .op = "debug_variance",
           .file = "one_pass_variance.cu",
           .hints = "one_pass_variance.md",
           .title = "a one-pass variance whose difference cancels",
           .tool = "",
           .symptom = "FAIL on every row of two or more elements: variances off by whole units, some of them "
                      "negative, where the reference has about 0.33"},
          {.id = "debug/divergent_barrier",
           .op = "debug_row_max",
           .file = "divergent_barrier.cu",
           .hints = "divergent_barrier.md",
           .title = "a barrier that only some threads reach",
           .tool = "synccheck",
           .symptom = "the checks may pass: the maxima can come out right, with the block's threads meeting at "
                      "barriers they were never meant to share"},
          {.id = "debug/misaligned_vector_load",
           .op = "debug_row_scale",
           .file = "misaligned_vector_load.cu",
           .hints = "misaligned_vector_load.md",
           .title = "a 16-byte load from an address that is not a multiple of 16",
           .tool = "memcheck",
           .symptom = "the run stops at the first shape of several rows whose length is not a multiple of 4: "
                      "'misaligned address', the GPU left in an error state in which nothing more can run"},
          {.id = "debug/launch_config",
           .op = "debug_bias_add",
           .file = "launch_config.cu",
           .hints = "launch_config.md",
           .title = "a launch with more threads a block than a block can have",
           .tool = "",
           .symptom = "right at 768 channels, ERROR at 1025 and 3072: the launch fails with 'invalid argument' "
                      "and the kernel never runs"},
          {.id = "debug/half_accumulation",
           .op = "debug_half_sum",
           .file = "half_accumulation.cu",
           .hints = "half_accumulation.md",
           .title = "a sum of f16 values accumulated in f16",
           .tool = "",
           .symptom = "FAIL on every row of more than one element: small errors on short rows, and on the long "
                      "ones (300,007 elements) inf"},
          {.id = "debug/grid_too_small",
           .op = "debug_square",
           .file = "grid_too_small.cu",
           .hints = "grid_too_small.md",
           .title = "a grid that does not cover the array",
           .tool = "",
           .symptom = "ERROR below 256 elements (no block to launch), FAIL at 257 and at every size not a multiple "
                      "of 256: the last elements still hold the harness's poison"},
          {.id = "debug/shared_memory_limit",
           .op = "debug_row_reverse",
           .file = "shared_memory_limit.cu",
           .hints = "shared_memory_limit.md",
           .title = "a launch asking for more shared memory than a kernel gets without asking",
           .tool = "",
           .symptom = "right up to 12,288 columns, ERROR from 12,289 on: the launch fails (48 KB of dynamic shared "
                      "memory is the default limit) and the kernel never runs"}},
     .folder = "debugging"}));

}  // namespace debugging

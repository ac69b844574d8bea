// klab/op.hpp — ops, impls, lessons and the registry.
//
// A lesson only registers: it describes each op once (tensors, seeded generator, fp64 CPU
// reference, tolerances, FLOP and byte counts, test and bench shapes) and adds impls that
// launch kernels. The harness (harness.hpp) and the CLI iterate over what is registered;
// no lesson has its own main, timer or compare loop.
//
//   KLAB_REGISTER(klab::register_op(make_vector_add_op()));
//   KLAB_REGISTER(klab::register_impl({.op = "vector_add", .name = "v1_naive", ...}));
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <source_location>
#include <span>
#include <string>
#include <vector>

#include "klab/compare.hpp"
#include "klab/dtype.hpp"
#include "klab/tensor.hpp"

namespace klab {

// One concrete instance of an op: its size parameters (meaning given by Op::dims), the
// element type, and a variant for ops with discrete modes (matmul "nt", softmax "causal").
struct Problem {
  Dims shape;
  DType dtype = DType::f32;
  std::string variant;
  std::string label() const;  // "4096x4096 f32 nt"
};

// How the harness prepares a tensor before every launch (verified or timed, outside the
// timed region):
//   plain:  an input: uploaded once, read-only; the harness checksums it after each launch
//           and fails an impl that wrote it. An output: poisoned before every launch with a
//           pattern no legal answer equals.
//   inout:  (inputs only) an input the impl updates in place (an optimizer step's parameters, logits a
//           loss overwrites with its gradient): restored from a pristine copy before every
//           launch, so every timed launch computes the same step from the same state, and
//           its final contents are checked like an output (the reference returns one array
//           per output, then one per inout input, in input order).
//   zeroed: (outputs only) an output that must start at zero (an atomic accumulation):
//           zero-filled instead of poisoned, so an element left unwritten where the answer
//           is zero cannot be told from a written one.
enum class Init { plain, inout, zeroed };

struct TensorSpec {
  std::string name;
  DType dtype;
  Dims shape;
  Init init = Init::plain;   // op.inputs: plain or inout; op.outputs: plain or zeroed
};

// Host inputs of one check: tensors, plus scalars (alpha of y = alpha*x, a seed for
// dropout, ...). Both come from the op's generator and a seed.
struct Inputs {
  std::vector<HostTensor> tensors;
  std::vector<double> scalars;
};

using Reference = std::vector<RefArray>;  // one fp64 array per output (RefArray: tensor.hpp)
// The reference of a one-output op, moved in. `return {std::move(y)}` copies y instead:
// an initializer_list holds const elements. For a 2^31-element output that copy is 17 GB,
// page-faulted in serially: half a minute of every check of such a shape.
inline Reference single_output(RefArray&& y) {
  Reference r;
  r.push_back(std::move(y));
  return r;
}

// A reference at a sample of output elements: for problems whose full fp64 reference is
// too costly on the CPU (a 8192^3 matmul is 5.5e11 multiply-adds).
struct SampledReference {
  std::vector<std::int64_t> index;   // flat output indices
  std::vector<double> value;         // fp64 reference at those indices
};

// The ceiling an op's "% of peak" is judged against (peaks.hpp). memory: the copy bandwidth
// (bytes read + written). memory_read: the read bandwidth, for ops that read their input
// and write a handful of values (sum, argmax, histogram, gemv): their bytes are nearly all
// reads, which run faster than a copy, so the copy peak would credit them over 100%.
// compute: the vendor GEMM rate of the dtype. link: the link between GPUs (lesson 16's
// all-reduce, whose bytes are the bus bytes each GPU sends); it has no measured peak, so its
// rows show no percentage and the vendor collective's row is their yardstick.
enum class Bound { memory, memory_read, compute, link };

struct Op {
  std::string lesson;                  // "01"
  std::string name;                    // "vector_add"
  std::string summary;                 // one line for `klab list`
  std::vector<std::string> dims;       // names of the shape entries: {"n"}, {"M","N","K"}
  std::vector<DType> dtypes;
  std::vector<std::string> variants = {""};
  std::vector<Dims> test_shapes;       // edge cases: 0, 1, primes, non-multiples, > 2^31
  // Why no test shape has a tensor past 2^31 elements ("the index output is int32"); empty:
  // the op must have one. The registry test holds every op to one or the other.
  std::string no_huge_shape;
  std::vector<Dims> bench_shapes;
  int seeds = 3;                       // seeds per test shape (shapes over large_numel get 1)
  std::int64_t large_numel = std::int64_t{1} << 28;
  std::string baseline;                // impl for the speedup column, measured in the same run
  // The impls `klab run` benches in its tour (plan.hpp), beside the baseline: the lesson's
  // first version and its best (one per dtype where they differ). Empty: the tour verifies
  // the op but benches none of it.
  std::vector<std::string> tour;
  Bound bound = Bound::memory;

  std::function<std::vector<TensorSpec>(const Problem&)> inputs;
  std::function<std::vector<TensorSpec>(const Problem&)> outputs;
  // Optional; default: every float input uniform in [-1, 1), ints in [0, 255].
  std::function<void(const Problem&, std::uint64_t seed, Inputs&)> generate;
  // fp64 reference computed from the inputs exactly as the kernels see them (rounded).
  std::function<Reference(const Problem&, const Inputs&)> reference;
  // Optional; default: default_tolerance(dtype of that output).
  std::function<Tolerance(const Problem&, int output)> tolerance;
  // Optional, in place of `tolerance`: output k's tolerance from this check's reference, for an
  // op whose error scales with sizes its generator cannot predict (lesson 16's training step:
  // gradients after a chain of bf16 layers, bounded relative to each tensor's typical size).
  // ref[j] holds checked tensor j's fp64 values (a sampled check: the values at the sample,
  // which such an op must make the whole tensor, in order, for atol_at's flat index to name
  // them). The bound may depend on the reference and the problem, never on the output.
  std::function<Tolerance(const Problem&, int output, const std::vector<std::span<const double>>& ref)> tolerance_at_ref;
  // Optional: when sample_only(p) is true the harness calls reference_sample instead of
  // reference and compares only the sampled elements (one entry per output). Test shapes
  // keep full references; this is for bench shapes.
  std::function<bool(const Problem&)> sample_only;
  std::function<std::vector<SampledReference>(const Problem&, const Inputs&, std::uint64_t seed)>
      reference_sample;
  // Optional property checks beside the compare (softmax rows sum to 1): "" = holds.
  std::function<std::string(const Problem&, const Inputs&, const std::vector<HostTensor>&)>
      properties;
  std::function<double(const Problem&)> flops;   // optional; 0 when absent
  std::function<double(const Problem&)> bytes;   // optional; default: inputs + outputs once
  // Optional; "" when the shape is valid for the op, else why not (wrong rank, n < 0).
  std::function<std::string(const Problem&)> validate;
};

enum class ImplKind { cpu, cuda, triton, vendor, exercise };
const char* impl_kind_name(ImplKind k);

// What an impl's run() receives. Tensors live in device memory (host memory for cpu
// impls); outputs arrive poisoned. run() only enqueues on `stream` (cpu impls compute).
struct Launch {
  const Problem& problem;
  std::vector<TensorView> in;
  std::vector<TensorView> out;
  const std::vector<double>& scalars;
  cudaStream_t stream = nullptr;
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
  // An impl with candidates (an autotuned one): -1 lets it choose (autotune); k runs its
  // candidate k as named by Impl::candidates, so that each candidate can be verified.
  int candidate = -1;
  // Where an impl with candidates writes the name of the one it ran (klab::autotune does),
  // so that a bench row says which configuration it timed; null when nobody asked.
  std::string* chosen = nullptr;
};

struct Impl {
  std::string op;                      // op name
  std::string name;                    // "v3_vec4", "triton", "cublas", "exercise"
  std::string summary;                 // what this version adds
  ImplKind kind = ImplKind::cuda;
  // Optional: "" when the impl handles the problem on this device, else the reason
  // (reported as unsupported, never as passed).
  std::function<std::string(const Problem&)> supports;
  std::function<std::size_t(const Problem&)> workspace;  // optional scratch bytes
  std::function<void(const Launch&)> run;
  // Optional: replaces the op's tolerance for this impl only, for an impl that computes the
  // same problem in a lower precision mode (cuBLAS TF32 on an f32 matmul). Keeps the op's
  // own tolerance as tight as its exact impls allow.
  std::function<Tolerance(const Problem&, int output)> tolerance;
  // Optional, for autotuned impls: the names of the configurations it chooses among for
  // this problem (Launch::candidate indexes them). `klab test` verifies every candidate,
  // not only the one that wins the timing; `--candidate NAME` runs one by name.
  std::function<std::vector<std::string>(const Problem&)> candidates;
  // The harness zero-fills the workspace before every launch (outside the timed region),
  // for impls whose scratch must start at zero (counters, atomic accumulators).
  bool zero_workspace = false;
  // For an impl whose work spans several GPUs (lesson 16's ranks): `stage` runs before every
  // launch and `gather` after it, both outside the timed region, with the launch's tensors.
  // The harness's tensors live on device 0, so stage puts each other rank's share of the
  // inputs, and its share of the poisoned outputs, on that rank's GPU; gather copies each
  // rank's outputs back into the harness's, where they are checked like any output. Both
  // only enqueue on the launch's stream. Graph mode cannot replay such an impl (reported).
  std::function<void(const Launch&)> stage;
  std::function<void(const Launch&)> gather;
  // For an impl that promises the same bits on the same inputs, run after run (no atomics
  // whose order varies, no sums split by a run-time choice): after a passing check `klab
  // test` launches it once more on the same inputs and fails it unless every output byte
  // matches the first launch's, and `klab bench` does the same after timing with the last
  // timed output. (Lesson 09's v2_mma_deterministic: a backward whose results a training
  // run can reproduce.)
  bool deterministic = false;
  // For an impl that draws its own random numbers (a vendor generator, lesson 07's cuRAND
  // dropout): its outputs are a different, equally valid draw, so they are not compared
  // element by element with the reference; the op's `properties` judge them instead (what
  // any valid output must satisfy, element by element and in distribution). An impl so
  // marked fails every check of an op that has no properties.
  bool judged_by_properties = false;
  // The source file that registered this impl, as its compiler named it (register_impl
  // fills it in from the call site). `klab list --json` prints it relative to the
  // repository root, and tools/impl_index.py checks the file's header comment, the
  // lesson README and the kernel names against the impl's name.
  std::string source;
  // For an impl compiled from another file than `source` (a Triton exercise: the .py the
  // build compiled ahead of time): that file's path. `klab check NN --triton` compiles it
  // first, for one clear line on an error, and rebuilds klab when it is newer.
  std::string built_from;
  // Kernels it launches that are named for their technique, not for it (docs/design.md,
  // "The impl name is the index": one template serving several impls), by their own name
  // (`matmul_mma_sync`). `klab inspect` shows them beside the kernels named for the impl.
  // `name@text` keeps only the instances whose demangled name contains text: the one
  // configuration of a template this impl launches (`matmul_wgmma@WgCfg<256, 3, false,`).
  std::vector<std::string> kernels;
};

// A lesson's further CUDA exercise, beside its own: graded by `klab check <id>` exactly as
// the lesson's (its impl `exercise` of `op`, the stub <folder>/<file> in klab, the solution
// solutions/<folder's name>/<file> in klab-solutions), its hints in <folder>/<hints>, its
// pass recorded under its id. A case of the debugging catalog is one too: its stub is the
// broken kernel, its solution the fix, and `tool` names the compute-sanitizer tool that
// catches the bug, which the fix must also pass clean.
struct LessonExercise {
  std::string id;          // "09b": the lesson's id and a letter, b for the second; a catalog's
                           // case: "debug/missing_barrier"
  std::string op;          // op its impl `exercise` computes (not the lesson's exercise_op)
  std::string reference;   // impl its speed is compared with; "" for none (not timed)
  std::string file;        // "exercise_bwd.cu"
  std::string hints;       // "hints_bwd.md"
  std::string title;       // "attention backward", for `klab list` and `klab progress`
  std::string tool;        // "racecheck", "memcheck", "initcheck", "synccheck"; "" for none
  std::string symptom;     // what the learner sees of the bug (a catalog case), for `klab debug`
};

struct Lesson {
  std::string id;                      // "01"
  std::string slug;                    // "vector-add"
  std::string title;                   // "Vector add and the element-wise family"
  std::string exercise_op;             // op the exercise impl computes
  std::string exercise_reference;      // impl the exercise's speed is compared with
  std::string exercise_hint;           // where the exercise lives, for messages
  std::vector<LessonExercise> more_exercises;   // "09b", ...: the lesson's further exercises
  // Its folder, relative to the repository, when it is not lessons/<id>-<slug> (the
  // debugging catalog's: "debugging"); lesson_folder() gives it either way.
  std::string folder;
};
// "lessons/09-attention", or a lesson's own `folder` ("debugging").
std::string lesson_folder(const Lesson& l);

// One CUDA exercise as the verbs (check, hint, solution, reset, list, progress) see it: the
// lesson's own (id "09": exercise.cu, hints.md) or a further one (id "09b").
struct ExerciseInfo {
  const Lesson* lesson = nullptr;
  std::string id, op, reference, file, hints;
  std::string where;    // "lessons/09-attention/exercise.cu" (with what to fill in), for messages
  std::string title;    // "" for the lesson's own
  std::string folder;   // "lessons/09-attention"; its solution is in solutions/<its last name>
  std::string tool;     // LessonExercise::tool
  std::string symptom;  // LessonExercise::symptom
};
// The lesson's CUDA exercises, its own first; empty when it has none.
std::vector<ExerciseInfo> exercises_of(const Lesson& l);
// "09b" (or "9b"), "debug/missing_barrier": that exercise; a lesson key ("09", "9",
// "attention", "09-attention"): the lesson's own. False when the key names none (*lesson_out: the lesson the key's digits
// name, or nullptr, for the message).
bool find_exercise(const std::string& key, ExerciseInfo& out, const Lesson** lesson_out = nullptr);

class Registry {
 public:
  bool add(Lesson l);
  bool add(Op op);
  bool add(Impl impl);

  const std::vector<Lesson>& lessons() const { return lessons_; }
  const std::vector<Op>& ops() const { return ops_; }
  const Lesson* find_lesson(const std::string& id_or_slug) const;  // "01", "1", "vector-add", "01-vector-add"
  const Op* find_op(const std::string& name) const;
  std::vector<const Op*> ops_of(const std::string& lesson_id) const;
  std::vector<const Impl*> impls_of(const std::string& op) const;
  const Impl* find_impl(const std::string& op, const std::string& name) const;
  // Problems with what was registered (unknown ops, duplicates); empty when consistent.
  std::vector<std::string> validate() const;

 private:
  std::vector<Lesson> lessons_;
  std::vector<Op> ops_;
  std::vector<Impl> impls_;
};

Registry& registry();

inline bool register_lesson(Lesson l) { return registry().add(std::move(l)); }
inline bool register_op(Op op) { return registry().add(std::move(op)); }
// `where` defaults to the caller's location: the file holding the KLAB_REGISTER statement.
inline bool register_impl(Impl impl, std::source_location where = std::source_location::current()) {
  if (impl.source.empty()) impl.source = where.file_name();
  return registry().add(std::move(impl));
}

// Shared supports() helpers.
std::string require_cc(int min_cc);                   // "" or "needs compute capability >= 9.0"
std::string require_index_fits_int32(std::int64_t n); // for teaching versions that use int

}  // namespace klab

#define KLAB_CONCAT_INNER(a, b) a##b
#define KLAB_CONCAT(a, b) KLAB_CONCAT_INNER(a, b)
// Runs `expr` during static initialisation of the lesson's object file.
#define KLAB_REGISTER(expr) \
  [[maybe_unused]] static const bool KLAB_CONCAT(klab_registered_, __COUNTER__) = (expr)

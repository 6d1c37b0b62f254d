//===- Check.h - Check a bundle entry against the float64 reference -*- C++ -*-===//
//
// Part of moec. Shared by `moec run` (host backend, in the compiler) and
// `moec-runner` (GPU machine, runtime only): makes random inputs for an
// entry, evaluates the entry's op list (Entry::refOps) with lib/Reference in
// float64, and compares.
//
// Two comparisons are made:
//  - per op: each op's reference runs on the values the kernels actually
//    produced for its inputs (intermediates read back), so one op's rounding
//    or a near-tie in routing cannot hide or blame another op; integer
//    results must match exactly, float results within the tolerance;
//  - end to end: the reference from the entry's inputs alone (reported).
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_CHECK_CHECK_H
#define MOEC_CHECK_CHECK_H

#include "moec/Runtime/Bundle.h"
#include "moec/Runtime/Executor.h"

#include <cstdint>
#include <string>
#include <vector>

namespace moec::check {

/// A dense row-major array in host memory, in its element type's encoding.
struct HostArray {
  rt::ElemType elem = rt::ElemType::F32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;

  int64_t numElements() const;
  double get(int64_t i) const;      ///< decoded to double
  void set(int64_t i, double v);    ///< rounded to the element type (RNE)

  /// Element i's raw encoding (f32 bits, bf16/f16 bits, FP8 byte, integer).
  uint64_t bits(int64_t i) const;
};

/// A zero-filled array of the given element type and shape.
HostArray makeHostArray(rt::ElemType elem, std::vector<int64_t> shape);

/// Host-memory views of `arrays` for rt::runEntry / runEntryWithAllBuffers
/// with a host launcher. The arrays must outlive the views.
std::vector<rt::ArrayRef> arrayRefs(std::vector<HostArray> &arrays);

/// Encoding of `v` in a float element type (f32, f16, bf16, f8E4M3FN,
/// f8E5M2): round to nearest even; f16/bf16 overflow to infinity, FP8
/// saturates to its largest finite value (as ref::roundToFP8 does).
uint32_t encodeFloat(rt::ElemType elem, double v);
/// Inverse of encodeFloat (exact).
double decodeFloat(rt::ElemType elem, uint32_t bits);
bool isFloatType(rt::ElemType elem);
bool isFP8Type(rt::ElemType elem);

/// How random router ids are drawn when an entry takes ids as an input, and
/// how router logits are skewed when it takes logits or hidden states.
enum class Routing {
  Uniform,     ///< every expert equally likely
  OneExpert,   ///< every token's first choice is expert 0
  HalfExperts, ///< only the first half of the experts get tokens
};
/// "uniform", "one-expert", "half-experts" ('_' also accepted).
bool parseRouting(const std::string &name, Routing &routing);
const char *routingName(Routing routing);

struct InputOptions {
  uint64_t seed = 1;
  Routing routing = Routing::Uniform;
};

/// Random inputs for `entry` with the given symbol values: floats uniform in
/// [-1, 1] (never all zero), ids distinct per row in [0, E). Deterministic
/// for a seed (own PRNG, not <random>'s distributions). How a buffer is filled
/// depends on its first consumer in Entry::refOps:
///  - ids of moe.sort_by_expert: distinct per row, per `routing`;
///  - router logits (operand 0 of moe.router_topk), or the A and B of the
///    linalg.matmul producing them: skewed towards expert 0 (OneExpert) or
///    away from the second half of the experts (HalfExperts);
///  - block scales of moe.grouped_matmul / moe.dequantize / moe.permute:
///    uniform in [0.5, 2); an NF4 codebook: ref::nf4Codebook(); NF4 data:
///    random bytes; the `experts` of moe.dequantize: distinct ids;
///  - other integer inputs (slots, offsets given directly): Unsupported
///    (entries should compute them with moe.sort_by_expert).
rt::Status makeInputs(const rt::Entry &entry,
                      const std::vector<int64_t> &symbols,
                      const InputOptions &options,
                      std::vector<HostArray> &inputs);

/// Host arrays for every buffer of the entry (inputs filled from `inputs`,
/// the rest filled with all-ones bytes: NaN / -1, so that an element no
/// kernel writes fails the check), for rt::runEntryWithAllBuffers.
rt::Status allocateBuffers(const rt::Entry &entry,
                           const std::vector<int64_t> &symbols,
                           const std::vector<HostArray> &inputs,
                           std::vector<HostArray> &buffers);

/// Fills every non-input buffer of `buffers` (as allocateBuffers makes them)
/// with the reference's values from the inputs alone, rounded to each
/// buffer's element type: what a correct implementation writes. For testing
/// the checker itself and for backends without kernels. Errors as checkEntry.
rt::Status computeReference(const rt::Entry &entry,
                            const std::vector<int64_t> &symbols,
                            std::vector<HostArray> &buffers);

/// One compared result. Rules: integer results must match exactly
/// (`mismatches` counts differing elements); float results pass when
/// relError <= tolerance; FP8 results (`fp8`) pass when no element differs
/// from the reference by more than one FP8 ulp, the step at the smaller of
/// the two magnitudes (`mismatches` counts those that do; relError is
/// reported as well).
struct OpReport {
  std::string op;        ///< "moe.router_topk"
  std::string result;    ///< buffer name
  std::string elem;      ///< element type of the result, "bf16"
  bool integer = false;
  bool fp8 = false;
  double relError = 0;   ///< ‖out−ref‖/‖ref‖ (floats)
  int64_t mismatches = 0;///< differing elements (integers, FP8)
  double tolerance = 0;  ///< relError bound; 1 (ulp) for FP8; 0 for integers
  bool pass = false;
  std::string note;      ///< why it failed, or what was excused (ties)
};

struct CheckReport {
  std::vector<OpReport> perOp;
  std::vector<OpReport> endToEnd; ///< one per output buffer
  bool pass = false;              ///< every per-op report passes
  std::string summary() const;    ///< a short table
};

struct CheckOptions {
  /// Also evaluate the whole entry from its inputs (CheckReport::endToEnd).
  /// The reference is plain float64 loops: large shapes take a while.
  bool endToEnd = true;
  /// moe.router_topk: a kernel's id that differs from the reference's is
  /// excused when their selection values differ by at most this, relative
  /// to the row's largest |selection value| (f32 vs float64 near-ties). The
  /// weights are then checked for the kernel's ids.
  double routerTieTolerance = 1e-5;
};

/// Compares `buffers` (every buffer after the run, read back to the host)
/// with the reference. Tolerance: 1e-5 for results computed in f32 from f32
/// inputs, 1e-2 when bf16/f16 (or FP8 operands) is involved, FP8 results
/// within one FP8 ulp per element. A reference error on the entry's own
/// inputs is an InvalidArgument status; on values the kernels produced, a
/// failing row. An op the checker does not know is Unsupported.
rt::Status checkEntry(const rt::Entry &entry,
                      const std::vector<int64_t> &symbols,
                      const std::vector<HostArray> &buffers,
                      CheckReport &report);
rt::Status checkEntry(const rt::Entry &entry,
                      const std::vector<int64_t> &symbols,
                      const std::vector<HostArray> &buffers,
                      const CheckOptions &options, CheckReport &report);

} // namespace moec::check

#endif // MOEC_CHECK_CHECK_H

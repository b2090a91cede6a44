// The summary's state in native form (DESIGN §3): what `telemetry.summary.Summary` holds once it was parsed or
// merged, with the wire codec (decode checks untrusted bytes exactly as the Python decoder did) and the merge
// (same order, same arithmetic, same bits as the Python merge it replaced).
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "block.hpp"
#include "croaring/roaring.h"
#include "tdigest.hpp"

namespace treemetry {

using roaring::api::roaring_bitmap_t;

// Bad input: Python sees ValueError("malformed summary: <what>").
struct Malformed : std::invalid_argument {
    using std::invalid_argument::invalid_argument;
};

// Summaries that cannot merge (k or max_centroids differ): Python sees ValueError(<what>).
struct Incompatible : std::invalid_argument {
    using std::invalid_argument::invalid_argument;
};

struct BitmapFree {
    void operator()(roaring_bitmap_t* r) const { roaring::api::roaring_bitmap_free(r); }
};
using Bitmap = std::unique_ptr<roaring_bitmap_t, BitmapFree>;

Bitmap empty_bitmap();
Bitmap copy_bitmap(const roaring_bitmap_t* r);

// A core's sources (or non-finite sources): read-only once made and shared by copies, so that the windows of one
// child's unit, which carry that child's sources byte for byte, hold one parse of them instead of a bitmap each (a
// rack's 19,200 child cores a step were 4-5 heap blocks each for their sources, made, read and freed on three
// threads: docs/scale.md, "One parse of a unit's sources"). Empty without a bitmap at all. Written only through
// own(), which makes the bitmap when there is none and copies it first when another core shares it. Threads: the
// cores sharing one bitmap may be read and dropped on different threads; today every native call that touches a
// shared core holds the GIL, which orders them. own() also fences after seeing itself the only holder, so that a
// core written on one thread after its last sharer was dropped on another stays correct if the GIL is ever released
// around merges or encodes (a reviewer's ThreadSanitizer reproduction of that case is why).
class SharedBitmap {
public:
    SharedBitmap() = default;
    explicit SharedBitmap(Bitmap b) : p_(b.release(), BitmapFree{}) {}
    const roaring_bitmap_t* get() const { return p_ ? p_.get() : empty(); }
    roaring_bitmap_t* own();
    bool same(const SharedBitmap& other) const { return p_ && p_ == other.p_; }  // one parse, so equal

private:
    static const roaring_bitmap_t* empty();
    std::shared_ptr<roaring_bitmap_t> p_;
};
// pyroaring's BitMap.deserialize: CRoaring's safe portable parse, then its internal validation.
Bitmap parse_bitmap(const uint8_t* p, size_t n, const char* name);
std::string serialize_bitmap(const roaring_bitmap_t* r);
// The bitmap run-optimised first (what the encoder writes): changes its containers, not its value.
std::string serialize_optimized(roaring_bitmap_t* r);
// BitMap.union(*bitmaps) as pyroaring computes it (a copy, `|`, or or_many): the same containers, so the same
// bytes once run-optimised.
Bitmap union_of(const std::vector<const roaring_bitmap_t*>& bitmaps);

using Pair = std::pair<double, uint32_t>;  // (value, source)
using Pairs = std::vector<Pair, BlockAlloc<Pair>>;  // a unit's block's when decoded by read_unit (block.hpp)

// Finite values beyond +-MAX_MAGNITUDE count as non-finite (ingest) and summaries whose min or max lie beyond it are
// refused (decode): then no sum, squared deviation or merge of up to 2**64 values can overflow float64.
constexpr double MAX_MAGNITUDE = 1e100;
constexpr size_t FOLD_BATCH = 256;  // folds held before compressing (as telemetry/summary/sketch.py)
constexpr uint32_t MAX_CENTROIDS_BOUND = 100000;

// Sketch state: a digest plus folds merged in one by one and compressed together later (Sketch.merge).
struct SketchState {
    uint32_t max_centroids = 200;
    bool has_digest = false;  // Python's `_digest is None` when false
    Digest digest;
    std::vector<Digest> folds;

    // Sketch._get: fold pending digests into the digest (fastdigest.merge_all, even of one part).
    void collapse();
    void fold(SketchState& other);  // Sketch.merge
};

struct Core {
    uint32_t k = 8;
    uint64_t count = 0;
    double sum = 0.0, mean = 0.0, m2 = 0.0;
    double min = INFINITY, max = -INFINITY;
    uint32_t argmin = 0, argmax = 0;
    Pairs top, bottom;  // value desc / asc, then source asc
    SketchState sketch;
    SharedBitmap sources;
    uint64_t nonfinite_count = 0;
    SharedBitmap nonfinite_sources;
    int64_t first_ns = 0, last_ns = 0;

    Core() = default;
    Core(const Core& other);
    Core(Core&&) = default;
    Core& operator=(const Core&) = delete;
    Core& operator=(Core&&) = default;

    bool any() const;  // counts or sources: not a fresh summary
};

// What the decodes of one unit share (read_unit makes one per unit): the sources a decode parsed last, and the bytes
// they were parsed from (which must outlive it), so that a decode of the same bytes shares that parse; and the block
// the decoded cores' lists are cut from (block.hpp), sealed when the memo goes (at the unit's read's end).
struct SourcesMemo {
    const uint8_t* p = nullptr;
    size_t n = 0;
    SharedBitmap parsed;
    uint32_t lo = 1, hi = 0;  // when `parsed` is the whole range [lo, hi] (else lo > hi): membership by bounds
    BlockRef block;

    SourcesMemo() = default;
    SourcesMemo(const SourcesMemo&) = delete;
    SourcesMemo& operator=(const SourcesMemo&) = delete;
    ~SourcesMemo() {
        if (block) block->seal();
    }
};

// Parses and checks untrusted bytes; throws Malformed (or WireError) with the reason. Every check is made whether or
// not the sources come from `memo`: equal bytes parse to the same bitmap.
Core decode(const uint8_t* data, size_t n, SourcesMemo* memo = nullptr);
// decode() into `out`, a fresh (default) Core, in place: read_unit decodes into its windows' cores so (a core moved in
// and a temporary's destructor were ~2 % of a rack's step). When it throws, `out` is left part-filled.
void decode_into(Core& out, const uint8_t* data, size_t n, SourcesMemo* memo = nullptr);
// The canonical bytes (those the Python encoder produced): collapses pending sketch folds.
std::string encode(Core& core);

// Sources shared by summaries that would merge; empty when they are disjoint.
std::vector<uint32_t> overlapping(const std::vector<Core*>& cores);
// Checks k and max_centroids agree (throws Incompatible).
void check_compatible(const Core& a, const Core& b);
// Summary.merge_all on two or more compatible, disjoint inputs whose sources' union is given: a new core,
// inputs left unchanged in value.
Core merge_all(const std::vector<Core*>& cores, const roaring_bitmap_t* union_);
// Summary.copy: an independent core (the source's pending sketch folds are compressed first, as there).
Core clone(Core& c);
// Summary.merge's fold of compatible, disjoint `others` into self.
void absorb(Core& self, const std::vector<Core*>& others, const roaring_bitmap_t* union_ = nullptr);

// fastdigest's binary layout of the core's sketch (TDigest.from_bytes), header filled as
// Sketch.from_centroids did; empty when the sketch is.
std::string fastdigest_bytes(Core& core);
// A digest read from fastdigest's binary layout (TDigest.to_bytes), for summaries built by ingest.
Digest digest_from_fastdigest(const uint8_t* p, size_t n);

}  // namespace treemetry

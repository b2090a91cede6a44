// See core.hpp. Every check in decode() is one the Python decoder made (telemetry/summary/summary.py before
// issue 29, kept as the oracle in tests/summary_oracle.py), with its message.
#include "core.hpp"

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "fsum.hpp"
#include "wire.hpp"

namespace treemetry {

using namespace roaring::api;

namespace {

std::string num(double x) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.17g", x);
    return buf;
}

[[noreturn]] void bad(const std::string& why) { throw Malformed("malformed summary: " + why); }

struct Bytes {
    const uint8_t* p = nullptr;
    size_t n = 0;
};

// A list of the wire's scalars (a packed field's, or its repeats'), its room kept between decodes: a packed field is
// read into room made once for the most its bytes can hold (its doubles by one memcpy, its varints without
// std::vector's check and count per element). Raw's std::vectors (an insert of the doubles, a push_back per source)
// made a rack's step 2.8 M instructions more (docs/scale.md, session 43).
template <class T>
class List {
public:
    size_t size() const { return n_; }
    bool empty() const { return n_ == 0; }
    const T* data() const { return p_.get(); }
    // Room for `more` elements after those held (grown when short, what is held kept): where they go; added() counts
    // those written there.
    T* room(size_t more) {
        if (cap_ - n_ < more) grow(n_ + more);
        return p_.get() + n_;
    }
    void added(size_t written) { n_ += written; }
    void push_back(T v) {
        *room(1) = v;
        ++n_;
    }
    // Empty; the room kept unless it grew beyond `keep` elements.
    void clear(size_t keep) {
        if (cap_ > keep) {
            p_.reset();
            cap_ = 0;
        }
        n_ = 0;
    }

private:
    void grow(size_t want) {
        size_t cap = std::max(want, 2 * cap_);
        std::unique_ptr<T[]> more(new T[cap]);
        std::copy(p_.get(), p_.get() + n_, more.get());
        p_ = std::move(more);
        cap_ = cap;
    }
    std::unique_ptr<T[]> p_;
    size_t n_ = 0, cap_ = 0;
};

// What the wire holds, before any check: upb's view of telemetry.v1.Summary.
struct Raw {
    uint64_t count = 0;
    double sum = 0, mean = 0, m2 = 0, min = 0, max = 0;
    uint32_t argmin = 0, argmax = 0, k = 0;
    List<double> top_values, bottom_values;
    List<uint32_t> top_sources, bottom_sources;
    uint32_t max_centroids = 0;
    Bytes means, weights, sources, nonfinite_sources;
    uint64_t nonfinite_count = 0;
    int64_t first_ns = 0, last_ns = 0;

    // Every field as a fresh Raw's, the lists' room kept (a thread's decodes reuse one Raw: no four allocations and
    // frees per summary), unless a list grew beyond what a summary of the tree's shape holds. Field by field: a fresh
    // Raw assigned over this one, its lists moved out and back, cost a decode ~70 instructions.
    void reset() {
        count = 0;
        sum = mean = m2 = min = max = 0;
        argmin = argmax = k = 0;
        max_centroids = 0;
        means = weights = sources = nonfinite_sources = Bytes();
        nonfinite_count = 0;
        first_ns = last_ns = 0;
        top_values.clear(kKeep);
        bottom_values.clear(kKeep);
        top_sources.clear(kKeep);
        bottom_sources.clear(kKeep);
    }
    static constexpr size_t kKeep = 64;
};

// A thread's decodes' Raw, found once per decode: out of line, so that the compiler cannot fold the thread-local's
// address into every use of a field (it did: a call to __tls_get_addr per field, 6 M instructions of a rack's step).
[[gnu::noinline]] Raw& scratch() {
    thread_local Raw raw;
    return raw;
}

void append_doubles(Reader& r, List<double>& out) {
    Reader body = r.sub();
    if (body.left() % 8) throw WireError("packed doubles not a multiple of 8 bytes");
    size_t n = body.left() / 8;
    if (n == 0) return;  // (no room made: memcpy's pointers may not be null)
    std::memcpy(out.room(n), body.data(), n * 8);
    out.added(n);
}

void append_uints(Reader& r, List<uint32_t>& out) {
    Reader body = r.sub();
    uint32_t* const first = out.room(body.left());  // at most one varint a byte
    uint32_t* at = first;
    while (!body.done()) *at++ = static_cast<uint32_t>(body.varint());
    out.added(static_cast<size_t>(at - first));
}

void parse_sketch(Reader r, Raw& raw) {
    // The encoder's order first (see parse): max_centroids, means, weights.
    if (r.next_tag(0x08)) raw.max_centroids = static_cast<uint32_t>(r.varint());
    if (r.next_tag(0x12)) {
        Reader body = r.sub();
        raw.means = Bytes{body.data(), body.left()};
    }
    if (r.next_tag(0x1a)) {
        Reader body = r.sub();
        raw.weights = Bytes{body.data(), body.left()};
    }
    while (!r.done()) {
        uint32_t field, type;
        r.tag(field, type);
        if (field == 1 && type == VARINT) {
            raw.max_centroids = static_cast<uint32_t>(r.varint());
        } else if ((field == 2 || field == 3) && type == LEN) {
            Reader body = r.sub();
            Bytes& b = field == 2 ? raw.means : raw.weights;
            b.p = body.data();
            b.n = body.left();
        } else {
            if (type == EGROUP) throw WireError("end group inside a sub-message");
            r.skip_field(field, type);
        }
    }
}

void parse(const uint8_t* data, size_t n, Raw& raw) {
    raw.reset();
    Reader r(data, n);
    // The encoder's layout first: each field at most once, in number order, in the wire type the encoder writes
    // (upb's and ours), so each tag is one compare of its bytes instead of a tag read, a switch and a type check. Each
    // read does what the loop below does for that tag, and a field absent moves on to the next; from the first tag
    // that is none of the rest of that order (a field repeated or out of order, another wire type or encoding of a tag,
    // an unknown field), the loop reads on from there. So the fields come out as the loop alone reads them, with the
    // same errors at the same bytes.
    if (r.next_tag(0x08)) raw.count = r.varint();
    if (r.next_tag(0x11)) raw.sum = r.fixed64_double();
    if (r.next_tag(0x19)) raw.mean = r.fixed64_double();
    if (r.next_tag(0x21)) raw.m2 = r.fixed64_double();
    if (r.next_tag(0x29)) raw.min = r.fixed64_double();
    if (r.next_tag(0x30)) raw.argmin = static_cast<uint32_t>(r.varint());
    if (r.next_tag(0x39)) raw.max = r.fixed64_double();
    if (r.next_tag(0x40)) raw.argmax = static_cast<uint32_t>(r.varint());
    if (r.next_tag(0x48)) raw.k = static_cast<uint32_t>(r.varint());
    if (r.next_tag(0x52)) append_doubles(r, raw.top_values);
    if (r.next_tag(0x5a)) append_uints(r, raw.top_sources);
    if (r.next_tag(0x62)) append_doubles(r, raw.bottom_values);
    if (r.next_tag(0x6a)) append_uints(r, raw.bottom_sources);
    if (r.next_tag(0x72)) parse_sketch(r.sub(), raw);
    if (r.next_tag(0x7a)) {
        Reader body = r.sub();
        raw.sources = Bytes{body.data(), body.left()};
    }
    if (r.next_tag(0x80, 0x01)) raw.nonfinite_count = r.varint();
    if (r.next_tag(0x8a, 0x01)) {
        Reader body = r.sub();
        raw.nonfinite_sources = Bytes{body.data(), body.left()};
    }
    if (r.next_tag(0x90, 0x01)) raw.first_ns = static_cast<int64_t>(r.varint());
    if (r.next_tag(0x98, 0x01)) raw.last_ns = static_cast<int64_t>(r.varint());
    while (!r.done()) {
        uint32_t field, type;
        r.tag(field, type);
        switch (field) {
            case 1: if (type == VARINT) { raw.count = r.varint(); continue; } break;
            case 2: if (type == FIXED64) { raw.sum = r.fixed64_double(); continue; } break;
            case 3: if (type == FIXED64) { raw.mean = r.fixed64_double(); continue; } break;
            case 4: if (type == FIXED64) { raw.m2 = r.fixed64_double(); continue; } break;
            case 5: if (type == FIXED64) { raw.min = r.fixed64_double(); continue; } break;
            case 6: if (type == VARINT) { raw.argmin = static_cast<uint32_t>(r.varint()); continue; } break;
            case 7: if (type == FIXED64) { raw.max = r.fixed64_double(); continue; } break;
            case 8: if (type == VARINT) { raw.argmax = static_cast<uint32_t>(r.varint()); continue; } break;
            case 9: if (type == VARINT) { raw.k = static_cast<uint32_t>(r.varint()); continue; } break;
            case 10:
            case 12: {
                List<double>& v = field == 10 ? raw.top_values : raw.bottom_values;
                if (type == LEN) { append_doubles(r, v); continue; }
                if (type == FIXED64) { v.push_back(r.fixed64_double()); continue; }
                break;
            }
            case 11:
            case 13: {
                List<uint32_t>& v = field == 11 ? raw.top_sources : raw.bottom_sources;
                if (type == LEN) { append_uints(r, v); continue; }
                if (type == VARINT) { v.push_back(static_cast<uint32_t>(r.varint())); continue; }
                break;
            }
            case 14: if (type == LEN) { parse_sketch(r.sub(), raw); continue; } break;
            case 15:
            case 17:
                if (type == LEN) {
                    Reader body = r.sub();
                    Bytes& b = field == 15 ? raw.sources : raw.nonfinite_sources;
                    b.p = body.data();
                    b.n = body.left();
                    continue;
                }
                break;
            case 16: if (type == VARINT) { raw.nonfinite_count = r.varint(); continue; } break;
            case 18: if (type == VARINT) { raw.first_ns = static_cast<int64_t>(r.varint()); continue; } break;
            case 19: if (type == VARINT) { raw.last_ns = static_cast<int64_t>(r.varint()); continue; } break;
            default: break;
        }
        if (type == EGROUP) throw WireError("end group at the top level");
        r.skip_field(field, type);
    }
}

// Membership in a summary's sources, asked for argmin, argmax and every top/bottom source of a decode (~18 times): a
// contiguous range of sources (an agent's or a rack's ranks, nearly always) is asked by its bounds, else the bitmap.
struct Members {
    const roaring_bitmap_t* r;
    uint32_t lo = 1, hi = 0;  // the range [lo, hi] when the bitmap is exactly that (lo > hi: not a range)

    explicit Members(const roaring_bitmap_t* bitmap) : r(bitmap) {
        if (roaring_bitmap_is_empty(r)) return;
        uint32_t first = roaring_bitmap_minimum(r), last = roaring_bitmap_maximum(r);
        if (roaring_bitmap_get_cardinality(r) == static_cast<uint64_t>(last) - first + 1) {
            lo = first;
            hi = last;
        }
    }
    Members(const roaring_bitmap_t* bitmap, uint32_t first, uint32_t last) : r(bitmap), lo(first), hi(last) {}
    bool has(uint32_t x) const { return lo <= hi ? lo <= x && x <= hi : roaring_bitmap_contains(r, x); }
};

// (values[i], sources[i]) read as one list of pairs: a random-access iterator over two lists, for Pairs::assign.
struct Zip {
    using iterator_category = std::random_access_iterator_tag;
    using value_type = Pair;
    using difference_type = std::ptrdiff_t;
    using pointer = const Pair*;
    using reference = Pair;
    const double* v;
    const uint32_t* s;
    Pair operator*() const { return Pair(*v, *s); }
    Zip& operator++() { ++v; ++s; return *this; }
    Zip operator++(int) { Zip old = *this; ++*this; return old; }
    Zip& operator--() { --v; --s; return *this; }
    Zip& operator+=(difference_type n) { v += n; s += n; return *this; }
    Zip operator+(difference_type n) const { return Zip{v + n, s + n}; }
    difference_type operator-(const Zip& o) const { return v - o.v; }
    bool operator==(const Zip& o) const { return v == o.v; }
    bool operator!=(const Zip& o) const { return v != o.v; }
};

// Sketch.from_wire / from_centroids / _from_lists: the checks, then the digest.
void check_sketch(const Raw& raw, Core& out) {
    if (raw.means.n % 8) bad("sketch.means holds " + std::to_string(raw.means.n) + " bytes, not a whole number of float64s");
    if (raw.weights.n % 8) bad("sketch.weights holds " + std::to_string(raw.weights.n) + " bytes, not a whole number of float64s");
    uint32_t mc = raw.max_centroids;
    if (!(2 <= mc && mc <= MAX_CENTROIDS_BOUND))
        bad("sketch max_centroids must be in [2, 100000], got " + std::to_string(mc));
    size_t n = raw.means.n / 8;
    if (raw.weights.n / 8 != n)
        bad("sketch has " + std::to_string(n) + " means but " + std::to_string(raw.weights.n / 8) + " weights");
    out.sketch.max_centroids = mc;
    if (n == 0) {
        if (out.count) bad("sketch is empty but the summary counts " + std::to_string(out.count) + " values");
        return;
    }
    if (n > 2 * static_cast<uint64_t>(mc) + 2)
        bad("sketch has " + std::to_string(n) + " centroids, more than its bound " + std::to_string(mc) + " allows");
    Digest& d = out.sketch.digest;
    d.means.resize(n);
    d.weights.resize(n);
    std::memcpy(d.means.data(), raw.means.p, n * 8);
    std::memcpy(d.weights.data(), raw.weights.p, n * 8);
    // One pass over the weights for three things, reported in the order the Python decoder checked them: all positive
    // and finite; their plain sum; and whether that sum is math.fsum's. Weights are counts: whole numbers whose running
    // sum stays below 2**53 add exactly in any order, so plain addition gives fsum's result; anything else takes the
    // exact path below.
    bool positive = true, exact = true;
    double total = 0.0;
    for (double w : d.weights) {
        positive &= w > 0;  // NaN fails it too
        total += w;
        // Every w >= 2**53 is whole; below it, a positive w's truncation to int64 is defined and is floor(w).
        exact &= w >= 9007199254740992.0 || (w > 0 && w == static_cast<double>(static_cast<int64_t>(w)));
    }
    if (!positive) bad("sketch weights must be positive and finite");
    for (size_t i = 1; i < n; ++i)
        if (!(d.means[i - 1] <= d.means[i])) bad("sketch means must be ascending");
    double lo = out.min, hi = out.max;
    double slack = 1e-9 * std::max({1.0, std::fabs(lo), std::fabs(hi)});
    if (!(lo - slack <= d.means[0] && d.means[n - 1] <= hi + slack))
        bad("sketch means lie outside the summary's [min, max]");
    if (!(exact && total <= 9007199254740992.0)) {
        Fsum mass;
        try {
            for (double w : d.weights) mass.add(w);
            total = mass.result();
        } catch (const std::exception&) {
            bad("sketch weights overflow a float64 sum");
        }
    }
    double count = static_cast<double>(out.count);
    if (!(std::fabs(total - count) <= 1e-6 * std::max(1.0, count)))
        bad("sketch weights sum to " + num(total) + " but the summary counts " + std::to_string(out.count) + " values");
    d.mass = total;
    d.count = out.count;
    out.sketch.has_digest = true;
}

bool pair_lt(const Pair& a, const Pair& b) {  // (value, source) ascending, as Python compares tuples
    return a.first < b.first || (a.first == b.first && a.second < b.second);
}
bool desc_lt(const Pair& a, const Pair& b) {  // (-value, source) ascending
    return a.first > b.first || (a.first == b.first && a.second < b.second);
}

// The first k pairs of the parts' lists taken in order (parts, then each list), as a stable sort of them all by `lt`
// would order them (what stable_sort then resize gave), without gathering or sorting them: each pair, in that order,
// goes in after every kept pair it is not before (so ties keep their input order), when it is before the last of k
// kept. A merge of 64 children keeps 8 of 512, nearly all of them turned away by one comparison. `lt` is a function
// object (inlined: through a function pointer, its calls were ~3 % of a rack's merges).
template <bool Top, class Lt>
Pairs first_k(const std::vector<Core*>& parts, size_t k, Lt lt) {
    Pairs out;
    if (k == 0) return out;
    size_t pairs = 0;  // k is a decoded summary's, any uint32: never reserve more than the parts hold
    for (const Core* s : parts) pairs += (Top ? s->top : s->bottom).size();
    out.reserve(std::min(k, pairs));
    for (const Core* s : parts)
        for (const Pair& p : Top ? s->top : s->bottom) {
            if (out.size() == k) {
                if (!lt(p, out.back())) continue;
                out.pop_back();
            }
            out.insert(std::upper_bound(out.begin(), out.end(), p, lt), p);
        }
    return out;
}

void pairs(const List<double>& values, const List<uint32_t>& sources, const char* name, Pairs& out) {
    if (values.size() != sources.size())
        bad(std::string(name) + " has " + std::to_string(values.size()) + " values but " +
            std::to_string(sources.size()) + " sources");
    for (size_t i = 0; i < values.size(); ++i)
        if (!std::isfinite(values.data()[i])) bad(std::string(name) + " values must be finite");
    // Made from the two lists in one allocation and one pass (resize zeroed each pair first, out of line).
    out.assign(Zip{values.data(), sources.data()}, Zip{values.data() + values.size(), sources.data() + values.size()});
}

}  // namespace

void* UnitBlock::take(size_t bytes, size_t align) {
    if (!sealed_.load(std::memory_order_relaxed) && bytes <= kMaxChunk) {
        size_t at = chunks_.empty() ? 0 : (used_ + align - 1) & ~(align - 1);
        if (chunks_.empty() || at + bytes > chunks_.back().size) {
            size_t size = chunks_.empty() ? kFirstChunk : std::min(2 * chunks_.back().size, kMaxChunk);
            size = std::max(size, bytes);  // a list larger than the chunk due next gets a chunk of its own size
            chunks_.push_back(Chunk{static_cast<char*>(::operator new(size)), size});
            at = 0;
        }
        used_ = at + bytes;
        return chunks_.back().base + at;
    }
    return ::operator new(bytes);
}

void UnitBlock::give(void* p) noexcept {
    if (!holds(p)) ::operator delete(p);
}

Bitmap empty_bitmap() { return Bitmap(roaring_bitmap_create()); }

Bitmap copy_bitmap(const roaring_bitmap_t* r) { return Bitmap(roaring_bitmap_copy(r)); }

const roaring_bitmap_t* SharedBitmap::empty() {
    // Never written (get() is const; own() makes a bitmap instead), so every thread may read it.
    static const roaring_bitmap_t none = [] {
        roaring_bitmap_t r;
        roaring_bitmap_init_cleared(&r);
        return r;
    }();
    return &none;
}

roaring_bitmap_t* SharedBitmap::own() {
    if (!p_) {
        p_.reset(roaring_bitmap_create(), BitmapFree{});
    } else if (p_.use_count() > 1) {  // another core reads it: this one writes its own copy
        p_.reset(roaring_bitmap_copy(p_.get()), BitmapFree{});
    } else {
        // The count is read relaxed: order the last other holder's reads (before it let go) before this write.
        std::atomic_thread_fence(std::memory_order_acquire);
    }
    return p_.get();
}

Bitmap parse_bitmap(const uint8_t* p, size_t n, const char* name) {
    if (n == 0) return empty_bitmap();
    Bitmap out(roaring_bitmap_portable_deserialize_safe(reinterpret_cast<const char*>(p), n));
    if (!out) bad(std::string(name) + " is not a portable roaring bitmap (Could not deserialize bitmap)");
    const char* reason = nullptr;
    if (!roaring_bitmap_internal_validate(out.get(), &reason))
        bad(std::string(name) + " is not a portable roaring bitmap (Invalid bitmap after deserialization: " +
            (reason ? reason : "?") + ")");
    return out;
}

Bitmap union_of(const std::vector<const roaring_bitmap_t*>& bitmaps) {
    if (bitmaps.size() == 1) return copy_bitmap(bitmaps[0]);
    if (bitmaps.size() == 2) return Bitmap(roaring_bitmap_or(bitmaps[0], bitmaps[1]));
    return Bitmap(roaring_bitmap_or_many(bitmaps.size(), const_cast<const roaring_bitmap_t**>(bitmaps.data())));
}

std::string serialize_optimized(roaring_bitmap_t* r) {
    roaring_bitmap_run_optimize(r);
    return serialize_bitmap(r);
}

std::string serialize_bitmap(const roaring_bitmap_t* r) {
    std::string out(roaring_bitmap_portable_size_in_bytes(r), '\0');
    roaring_bitmap_portable_serialize(r, out.data());
    return out;
}

void SketchState::collapse() {
    if (folds.empty()) return;
    std::vector<const Digest*> parts;
    parts.reserve(folds.size() + 1);
    if (has_digest) parts.push_back(&digest);
    for (const Digest& f : folds) parts.push_back(&f);
    Digest merged = merge_digests(parts, max_centroids);
    folds.clear();
    digest = std::move(merged);
    has_digest = true;
}

void SketchState::fold(SketchState& other) {
    other.collapse();
    if (!other.has_digest) return;
    folds.push_back(other.digest);
    if (folds.size() >= FOLD_BATCH) collapse();
}

Core::Core(const Core& other)
    : k(other.k), count(other.count), sum(other.sum), mean(other.mean), m2(other.m2), min(other.min),
      max(other.max), argmin(other.argmin), argmax(other.argmax), top(other.top), bottom(other.bottom),
      sketch(other.sketch), sources(other.sources), nonfinite_count(other.nonfinite_count),
      nonfinite_sources(other.nonfinite_sources), first_ns(other.first_ns),
      last_ns(other.last_ns) {}

bool Core::any() const { return count || nonfinite_count || !roaring_bitmap_is_empty(sources.get()); }

Core decode(const uint8_t* data, size_t n, SourcesMemo* memo) {
    Core out;
    decode_into(out, data, n, memo);
    return out;
}

void decode_into(Core& out, const uint8_t* data, size_t n, SourcesMemo* memo) {
    Raw& raw = scratch();
    try {
        parse(data, n, raw);
    } catch (const WireError& e) {
        bad(std::string("not a telemetry.v1.Summary message (") + e.what() + ")");
    }
    if (memo) {  // the lists cut from the unit's block
        if (!memo->block) memo->block = BlockRef::make();
        // Each list takes the block by a swap with an empty list made with it (the allocators swap too: they
        // propagate on swap), not by a move-assignment: each allocator copy is an atomic count on the block, and a
        // move-assigned list's made ~5 of them, 20 a decode; this makes 8.
        const BlockAlloc<Pair> pairs_alloc(memo->block);
        const BlockAlloc<double> doubles_alloc(pairs_alloc);
        Pairs(pairs_alloc).swap(out.top);
        Pairs(pairs_alloc).swap(out.bottom);
        Doubles(doubles_alloc).swap(out.sketch.digest.means);
        Doubles(doubles_alloc).swap(out.sketch.digest.weights);
    }
    out.k = raw.k;
    out.count = raw.count;
    out.sum = raw.sum;
    out.mean = raw.mean;
    out.m2 = raw.m2;
    Members members(nullptr, 1, 0);
    if (memo && raw.sources.n && raw.sources.n == memo->n && std::memcmp(raw.sources.p, memo->p, memo->n) == 0) {
        out.sources = memo->parsed;
        members = Members(out.sources.get(), memo->lo, memo->hi);
    } else {
        if (raw.sources.n) out.sources = SharedBitmap(parse_bitmap(raw.sources.p, raw.sources.n, "sources"));
        members = Members(out.sources.get());
        if (memo && raw.sources.n) {
            memo->p = raw.sources.p;
            memo->n = raw.sources.n;
            memo->parsed = out.sources;
            memo->lo = members.lo;
            memo->hi = members.hi;
        }
    }
    out.nonfinite_count = raw.nonfinite_count;
    if (raw.nonfinite_sources.n)
        out.nonfinite_sources =
            SharedBitmap(parse_bitmap(raw.nonfinite_sources.p, raw.nonfinite_sources.n, "nonfinite_sources"));
    out.first_ns = raw.first_ns;
    out.last_ns = raw.last_ns;
    const roaring_bitmap_t* sources = out.sources.get();
    if (out.count) {
        out.min = raw.min;
        out.argmin = raw.argmin;
        out.max = raw.max;
        out.argmax = raw.argmax;
        double lo = out.min, hi = out.max;
        if (!(std::isfinite(lo) && std::isfinite(hi) && lo <= hi))
            bad("min " + num(lo) + " / max " + num(hi) + " are not finite and ordered");
        if (!(std::isfinite(out.sum) && std::isfinite(out.mean) && std::isfinite(out.m2)))
            bad("sum, mean and m2 must be finite");
        double slack = 1e-9 * std::max({1.0, std::fabs(lo), std::fabs(hi)});
        if (!(lo - slack <= out.mean && out.mean <= hi + slack))
            bad("mean " + num(out.mean) + " lies outside [min, max] = [" + num(lo) + ", " + num(hi) + "]");
        double span = hi - lo;
        double count = static_cast<double>(out.count);
        if (!(-slack * slack <= out.m2 && out.m2 <= span * span * count * (1 + 1e-9) + slack * slack * count))
            bad("m2 " + num(out.m2) + " is impossible for " + std::to_string(out.count) + " values in [" + num(lo) +
                ", " + num(hi) + "]");
        if (!(std::fabs(lo) <= MAX_MAGNITUDE && std::fabs(hi) <= MAX_MAGNITUDE))
            bad("min " + num(lo) + " / max " + num(hi) + " lie beyond +-1e100 (such values count as non-finite)");
        // Twice the bound: rounding never comes near it; overflow needs far more.
        if (!(std::fabs(out.sum) <= 2 * count * std::max(std::fabs(lo), std::fabs(hi))))
            bad("sum " + num(out.sum) + " is impossible for " + std::to_string(out.count) + " values in [" + num(lo) +
                ", " + num(hi) + "]");
        if (!members.has(out.argmin) || !members.has(out.argmax))
            bad("argmin/argmax must be among the sources");
    } else {
        if (!raw.top_values.empty() || !raw.bottom_values.empty())
            bad("an empty summary cannot have top/bottom values");
        if (out.sum != 0.0 || out.mean != 0.0 || out.m2 != 0.0)
            bad("a summary without finite values must have sum, mean and m2 of 0");
    }
    pairs(raw.top_values, raw.top_sources, "top", out.top);
    pairs(raw.bottom_values, raw.bottom_sources, "bottom", out.bottom);
    uint64_t expected = std::min<uint64_t>(out.k, out.count);
    if (out.top.size() != expected || out.bottom.size() != expected)
        bad("top/bottom must hold min(k, count) = " + std::to_string(expected) + " pairs");
    if (expected > 1) {
        for (size_t i = 1; i < expected; ++i)
            if (desc_lt(out.top[i], out.top[i - 1]) || pair_lt(out.bottom[i], out.bottom[i - 1]))
                bad("top/bottom pairs are not in order");
    }
    if (expected) {
        if (!(out.top[0].first == out.max && out.top[0].second == out.argmax) ||
            !(out.bottom[0].first == out.min && out.bottom[0].second == out.argmin))
            bad("top/bottom disagree with max/min");
        if (out.top.back().first < out.min || out.bottom.back().first > out.max)
            bad("top/bottom values lie outside [min, max]");
        for (const auto* list : {&out.top, &out.bottom})
            for (const Pair& p : *list)
                if (!members.has(p.second)) bad("top/bottom sources must be among the sources");
    }
    uint64_t n_nonfinite_sources = roaring_bitmap_get_cardinality(out.nonfinite_sources.get());
    if (roaring_bitmap_is_empty(sources) && (out.count || out.nonfinite_count)) bad("values without sources");
    if ((out.nonfinite_count == 0) != (n_nonfinite_sources == 0))
        bad("nonfinite_count and nonfinite_sources disagree");
    if (out.nonfinite_count < n_nonfinite_sources) bad("fewer non-finite values than sources that sent them");
    if (!roaring_bitmap_is_subset(out.nonfinite_sources.get(), sources))
        bad("nonfinite_sources must be among the sources");
    if (out.first_ns > out.last_ns) bad("first_time_ns is after last_time_ns");
    check_sketch(raw, out);
}

namespace {

// serialize_optimized of a core's bitmap, on its own copy when it is shared (never writing what another core reads).
std::string optimized(SharedBitmap& b) {
    if (roaring_bitmap_is_empty(b.get())) return serialize_bitmap(b.get());
    return serialize_optimized(b.own());
}

}  // namespace

std::string encode(Core& c) {
    c.sketch.collapse();
    std::string sources = optimized(c.sources);
    Writer w;
    w.out.reserve(96 + sources.size() + 16 * c.sketch.digest.means.size() + 24 * c.top.size());
    w.uint_field(1, c.count);
    w.double_field(2, c.sum);
    w.double_field(3, c.mean);
    w.double_field(4, c.m2);
    if (c.count) {
        w.double_field(5, c.min);
        w.uint_field(6, c.argmin);
        w.double_field(7, c.max);
        w.uint_field(8, c.argmax);
    }
    w.uint_field(9, c.k);
    if (c.count) {
        for (int which = 0; which < 2; ++which) {
            const Pairs& list = which ? c.bottom : c.top;
            std::vector<double> values;
            std::vector<uint32_t> srcs;
            values.reserve(list.size());
            srcs.reserve(list.size());
            for (const Pair& p : list) {
                values.push_back(p.first);
                srcs.push_back(p.second);
            }
            w.packed_doubles(which ? 12 : 10, values);
            w.packed_uints(which ? 13 : 11, srcs);
        }
    }
    {
        Writer s;
        s.uint_field(1, c.sketch.max_centroids);
        const Digest& d = c.sketch.digest;
        if (c.sketch.has_digest) {
            s.packed_doubles(2, d.means);
            s.packed_doubles(3, d.weights);
        }
        w.tag(14, LEN);
        w.varint(s.out.size());
        w.out += s.out;
    }
    w.bytes_field(15, sources.data(), sources.size());
    w.uint_field(16, c.nonfinite_count);
    if (c.nonfinite_count) {
        std::string nf = optimized(c.nonfinite_sources);
        w.bytes_field(17, nf.data(), nf.size());
    }
    w.uint_field(18, static_cast<uint64_t>(c.first_ns));
    w.uint_field(19, static_cast<uint64_t>(c.last_ns));
    return std::move(w.out);
}

void check_compatible(const Core& a, const Core& b) {
    if (a.k != b.k)
        throw Incompatible("cannot merge summaries with k=" + std::to_string(a.k) + " and k=" + std::to_string(b.k));
    if (a.sketch.max_centroids != b.sketch.max_centroids)
        throw Incompatible("cannot merge summaries with max_centroids=" + std::to_string(a.sketch.max_centroids) +
                           " and " + std::to_string(b.sketch.max_centroids));
}

std::vector<uint32_t> overlapping(const std::vector<Core*>& cores) {
    Bitmap seen = empty_bitmap(), overlap = empty_bitmap();
    for (Core* c : cores) {
        Bitmap both(roaring_bitmap_and(seen.get(), c->sources.get()));
        roaring_bitmap_or_inplace(overlap.get(), both.get());
        roaring_bitmap_or_inplace(seen.get(), c->sources.get());
    }
    std::vector<uint32_t> out(roaring_bitmap_get_cardinality(overlap.get()));
    roaring_bitmap_to_uint32_array(overlap.get(), out.data());
    return out;
}

void absorb(Core& self, const std::vector<Core*>& others, const roaring_bitmap_t* union_) {
    std::vector<Core*> parts;  // (these lists reserved: grown one push_back at a time, a merge of 64 made ~25 heap blocks)
    parts.reserve(others.size() + 1);
    bool self_first = self.any();
    if (self_first) parts.push_back(&self);
    parts.insert(parts.end(), others.begin(), others.end());

    unsigned __int128 total = 0;
    std::vector<Core*> valued;
    valued.reserve(parts.size());
    for (Core* s : parts)
        if (s->count) {
            valued.push_back(s);
            total += s->count;
        }
    if (total > UINT64_MAX) throw std::overflow_error("merged count does not fit 64 bits");
    double mean = 0.0, m2 = 0.0, sum = 0.0;
    if (valued.size() == 1) {
        mean = valued[0]->mean;
        m2 = valued[0]->m2;
        sum = valued[0]->sum;
    } else if (total) {
        // Chan et al., with the partial sums combined exactly (math.fsum) as the Python merge did.
        Fsum fm;
        for (Core* s : valued) fm.add(static_cast<double>(s->count) * s->mean);
        mean = fm.result() / static_cast<double>(static_cast<uint64_t>(total));
        Fsum f2, fs;
        for (Core* s : valued) {
            double d = s->mean - mean;
            f2.add(s->m2 + static_cast<double>(s->count) * d * d);
            fs.add(s->sum);
        }
        m2 = f2.result();
        sum = fs.result();
    }
    double lo = self.min, hi = self.max;
    uint32_t lo_src = self.argmin, hi_src = self.argmax;
    for (Core* s : others) {
        if (s->count) {
            if (s->min < lo || (s->min == lo && s->argmin < lo_src)) {
                lo = s->min;
                lo_src = s->argmin;
            }
            if (s->max > hi || (s->max == hi && s->argmax < hi_src)) {
                hi = s->max;
                hi_src = s->argmax;
            }
        }
    }
    if (self.k) {
        Pairs top = first_k<true>(parts, self.k, [](const Pair& a, const Pair& b) { return desc_lt(a, b); });
        self.bottom = first_k<false>(parts, self.k, [](const Pair& a, const Pair& b) { return pair_lt(a, b); });
        self.top = std::move(top);
    }
    if (self_first) {
        for (Core* o : others) self.sketch.fold(o->sketch);
    } else {
        // Sketch.merge_all: the inputs' digests (collapsed); one is copied, several are merged.
        std::vector<const Digest*> digests;
        digests.reserve(parts.size());
        for (Core* s : parts) {
            s->sketch.collapse();
            if (s->sketch.has_digest) digests.push_back(&s->sketch.digest);
        }
        SketchState merged;
        merged.max_centroids = self.sketch.max_centroids;
        if (digests.size() == 1) {
            merged.digest = *digests[0];
            merged.has_digest = true;
        } else if (digests.size() > 1) {
            merged.digest = merge_digests(digests, merged.max_centroids);
            merged.has_digest = true;
        }
        self.sketch = std::move(merged);
    }
    self.count = static_cast<uint64_t>(total);
    self.sum = sum;
    self.mean = mean;
    self.m2 = m2;
    self.min = lo;
    self.argmin = lo_src;
    self.max = hi;
    self.argmax = hi_src;
    if (union_) {
        self.sources = SharedBitmap(copy_bitmap(union_));
    } else {
        std::vector<const roaring_bitmap_t*> all{self.sources.get()};
        for (Core* o : others) all.push_back(o->sources.get());
        self.sources = SharedBitmap(union_of(all));
    }
    unsigned __int128 nonfinite = self.nonfinite_count;
    bool any_nonfinite = false;
    for (Core* o : others) {
        nonfinite += o->nonfinite_count;
        any_nonfinite = any_nonfinite || o->nonfinite_count;
    }
    if (nonfinite > UINT64_MAX) throw std::overflow_error("merged nonfinite_count does not fit 64 bits");
    self.nonfinite_count = static_cast<uint64_t>(nonfinite);
    if (any_nonfinite) {
        std::vector<const roaring_bitmap_t*> all{self.nonfinite_sources.get()};
        for (Core* o : others) all.push_back(o->nonfinite_sources.get());
        self.nonfinite_sources = SharedBitmap(union_of(all));
    }
    bool have_first = false;
    int64_t first = 0, last = 0;
    bool have_last = false;
    for (Core* s : parts) {
        if (s->first_ns && (!have_first || s->first_ns < first)) {
            first = s->first_ns;
            have_first = true;
        }
        if (!have_last || s->last_ns > last) {
            last = s->last_ns;
            have_last = true;
        }
    }
    self.first_ns = have_first ? first : 0;
    self.last_ns = last;
}

Core merge_all(const std::vector<Core*>& cores, const roaring_bitmap_t* union_) {
    // Merge order: by lowest source id, then count of sources, empty summaries first (Python's _order_key), stable.
    // Inputs that share no source (every caller's: a window's parts are disjoint) never share a lowest source, so the
    // count decides nothing: it is counted only when two non-empty inputs do share their lowest (a roaring cardinality
    // per input was 1.3 M instructions of a rack's step).
    std::vector<std::pair<std::pair<int64_t, uint64_t>, Core*>> keyed;
    keyed.reserve(cores.size());
    auto order = [&](bool counted) {
        keyed.clear();
        for (Core* c : cores) {
            const roaring_bitmap_t* s = c->sources.get();
            std::pair<int64_t, uint64_t> key{-1, 0};
            if (!roaring_bitmap_is_empty(s))
                key = {roaring_bitmap_minimum(s), counted ? roaring_bitmap_get_cardinality(s) : 0};
            keyed.emplace_back(key, c);
        }
        std::stable_sort(keyed.begin(), keyed.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    };
    order(false);
    for (size_t i = 1; i < keyed.size(); ++i)
        if (keyed[i].first.first >= 0 && keyed[i].first.first == keyed[i - 1].first.first) {
            order(true);
            break;
        }
    std::vector<Core*> ordered;
    ordered.reserve(keyed.size());
    for (auto& kc : keyed) ordered.push_back(kc.second);
    Core merged;
    merged.k = cores[0]->k;
    merged.sketch.max_centroids = cores[0]->sketch.max_centroids;
    absorb(merged, ordered, union_);
    return merged;
}

Core clone(Core& c) {
    c.sketch.collapse();
    return Core(c);
}

std::string fastdigest_bytes(Core& c) {
    c.sketch.collapse();
    if (!c.sketch.has_digest) return {};
    const Digest& d = c.sketch.digest;
    uint64_t n = d.means.size();
    std::string out(80 + 16 * n, '\0');
    char* p = out.data();
    std::memcpy(p, "FASTDIG~", 8);
    uint32_t version = 1;
    std::memcpy(p + 8, &version, 4);
    std::memcpy(p + 12, &n, 8);
    uint64_t mc = c.sketch.max_centroids;
    std::memcpy(p + 20, &mc, 8);
    std::memcpy(p + 28, &d.mass, 8);
    std::memcpy(p + 36, &c.sum, 8);
    std::memcpy(p + 44, &c.min, 8);
    std::memcpy(p + 52, &c.max, 8);
    std::memcpy(p + 60, &d.count, 16);
    for (uint64_t i = 0; i < n; ++i) {
        std::memcpy(p + 80 + 16 * i, &d.means[i], 8);
        std::memcpy(p + 88 + 16 * i, &d.weights[i], 8);
    }
    return out;
}

Digest digest_from_fastdigest(const uint8_t* p, size_t size) {
    if (size < 80 || std::memcmp(p, "FASTDIG~", 8) != 0) throw std::invalid_argument("not a fastdigest digest");
    uint64_t n;
    std::memcpy(&n, p + 12, 8);
    if (size != 80 + 16 * n) throw std::invalid_argument("fastdigest digest of the wrong size");
    Digest d;
    std::memcpy(&d.mass, p + 28, 8);
    std::memcpy(&d.count, p + 60, 16);
    d.means.resize(n);
    d.weights.resize(n);
    for (uint64_t i = 0; i < n; ++i) {
        std::memcpy(&d.means[i], p + 80 + 16 * i, 8);
        std::memcpy(&d.weights[i], p + 88 + 16 * i, 8);
    }
    return d;
}

}  // namespace treemetry

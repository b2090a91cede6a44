// fastdigest 0.12.0's merge of many t-digests (src/tdigest.rs, TDigest::merge_digests), its digest of a batch of
// values (TDigest.from_values: merge_unsorted into an empty digest) and its batch_update (merge_unsorted into a digest
// that holds centroids already: `merge_sorted`), ported line by line so that the centroids come
// out bit for bit as fastdigest gives them (tests/test_native.py and tests/test_native_ingest.py check it).
// Queries stay with fastdigest in Python (telemetry/summary/sketch.py).
#pragma once

#include <algorithm>
#include <cassert>
#include <cstdint>
#include <memory>
#include <vector>

#include "block.hpp"

namespace treemetry {

// One digest: centroid means (ascending) and weights, its mass (sum of weights, as fastdigest carries it) and
// the count of values it stands for (fastdigest's u128 `count`, used only for its recompute threshold).
struct Digest {
    Doubles means;  // a unit's block's when decoded by read_unit (block.hpp)
    Doubles weights;
    double mass = 0.0;
    unsigned __int128 count = 0;

    bool empty() const { return means.empty(); }
};

namespace detail {

inline double k_to_q(double k, double d) {
    double k_div_d = k / d;
    if (k_div_d >= 0.5) {
        double base = 1.0 - k_div_d;
        return 1.0 - 2.0 * base * base;
    }
    return 2.0 * k_div_d * k_div_d;
}

struct Centroid {
    double mean;
    double weight;
};

// A stable merge of src[first, middle) and src[middle, last) (each ascending) into dst[first, last): ties go to the left
// run, as fastdigest's external_merge; branch-free (the runs interleave at random, so a branch mispredicts half the
// time). The output is filled from both ends at once: the smallest element left goes to the front, the largest to the
// back (ties there to the right run, which comes after in a stable merge), so that each step's next load, which waits
// on its compare, is one of two independent chains instead of one; merge_two runs two such merges in one loop (four
// chains). Each run's order and the tie rule give the very sequence a front-only merge gives. While both runs hold at
// least two elements not yet taken, a front step and a back step can neither take the same element nor run a run dry;
// the rest (a run down to one element or none) is merged from the front. Precondition: no mean is NaN (the two ends
// rely on a total order; decode refuses NaN means with its ascending check, and build() takes only this process's
// digests): with NaN the two ends may disagree with a front-only merge (review: 2,157 of 3,000 NaN cases differed).
struct Merge {
    const Centroid *l, *lb, *r, *rb;  // each run's next element from the front and from the back (inclusive)
    Centroid *o, *ob;

    Merge(const Centroid* src, Centroid* dst, size_t first, size_t middle, size_t last)
        : l(src + first), lb(src + middle - 1), r(src + middle), rb(src + last - 1), o(dst + first),
          ob(dst + last - 1) {}

    bool both_ends() const { return l < lb && r < rb; }

    [[gnu::always_inline]] void step() {  // inlined whatever else grows around it (a call here is ~40 % more)
        bool right = r->mean < l->mean;
        *o++ = right ? *r : *l;
        r += right;
        l += !right;
        bool left = rb->mean < lb->mean;
        *ob-- = left ? *lb : *rb;
        lb -= left;
        rb -= !left;
    }

    void finish() {
        while (l <= lb && r <= rb) {
            bool right = r->mean < l->mean;
            *o++ = right ? *r : *l;
            r += right;
            l += !right;
        }
        while (l <= lb) *o++ = *l++;
        while (r <= rb) *o++ = *r++;
    }
};

inline void merge_runs(const Centroid* src, Centroid* dst, size_t first, size_t middle, size_t last) {
    if (first == middle || middle == last) {  // an empty run (a digest of no centroids, or no mass)
        std::copy(src + first, src + last, dst + first);
        return;
    }
    Merge m(src, dst, first, middle, last);
    while (m.both_ends()) m.step();
    m.finish();
}

// Two disjoint merges (a level's neighbouring pairs of runs) stepped together while both can step from both ends.
inline void merge_two(const Centroid* src, Centroid* dst, size_t f1, size_t m1, size_t l1, size_t f2, size_t m2,
                      size_t l2) {
    if (f1 == m1 || m1 == l1 || f2 == m2 || m2 == l2) {
        merge_runs(src, dst, f1, m1, l1);
        merge_runs(src, dst, f2, m2, l2);
        return;
    }
    Merge a(src, dst, f1, m1, l1), b(src, dst, f2, m2, l2);
    while (a.both_ends() && b.both_ends()) {
        a.step();
        b.step();
    }
    while (a.both_ends()) a.step();
    while (b.both_ends()) b.step();
    a.finish();
    b.finish();
}

// The pairwise passes' two buffers, kept by each thread between its merges (grown as needed, up to KEPT_CENTROIDS;
// a larger merge's are its own). Allocated per merge, the root's (32 digests of ~192 centroids: ~200 KB, past malloc's
// mmap threshold) came from fresh pages every time: perf put the page faults at a third of the merge's CPU there
// (docs/scale.md, "The root's step, counted"). Every slot is written before it is read, so what a buffer held
// before does not matter.
//
// The rule: at most one Scratch that uses the kept buffer is alive per thread at a time, so no merge may run inside
// another on the same thread (a second Scratch would be handed the very buffer the first is still merging in, and
// growing it would free that buffer under the first). merge_digests makes one Scratch, merges, and lets it go
// before it returns, calling nothing that merges; two threads merging at once each have their own buffer
// (thread_local). A debug build (without NDEBUG) asserts the rule.
constexpr size_t KEPT_CENTROIDS = size_t(1) << 18;  // 4 MiB a thread at most (two buffers of 16-byte centroids)

class Scratch {
   public:
    explicit Scratch(size_t n) {
        thread_local std::unique_ptr<Centroid[]> kept;
        thread_local size_t kept_size = 0;
        if (n > KEPT_CENTROIDS) {
            own_.reset(new Centroid[n]);
            data_ = own_.get();
            return;
        }
        assert(!kept_in_use() && "a merge inside another merge on one thread: Scratch's rule (one live per thread)");
#ifndef NDEBUG
        kept_in_use() = true;
        uses_kept_ = true;
#endif
        if (n > kept_size) {
            size_t size = std::min(std::max(n, 2 * kept_size), KEPT_CENTROIDS);
            kept.reset();  // the old one first: at most one kept buffer alive
            kept.reset(new Centroid[size]);
            kept_size = size;
        }
        data_ = kept.get();
    }
    Scratch(const Scratch&) = delete;
    Scratch& operator=(const Scratch&) = delete;
#ifndef NDEBUG
    ~Scratch() {
        if (uses_kept_) kept_in_use() = false;
    }
#endif
    Centroid* get() const { return data_; }

   private:
#ifndef NDEBUG
    static bool& kept_in_use() {  // whether a Scratch of this thread holds the kept buffer now (debug builds only)
        thread_local bool in_use = false;
        return in_use;
    }
    bool uses_kept_ = false;
#endif
    std::unique_ptr<Centroid[]> own_;
    Centroid* data_ = nullptr;
};

// fastdigest's stable sort of the compressed centroids by mean. They nearly always come out of the compressing pass
// in order already (a merged centroid's mean lies between its parts'), and a stable sort leaves a sorted list as it
// is: then the sort, and the buffer it allocates, are skipped (~1 % of a rack's step).
inline void sort_by_mean(std::vector<Centroid>& cs) {
    auto by_mean = [](const Centroid& a, const Centroid& b) { return a.mean < b.mean; };
    if (!std::is_sorted(cs.begin(), cs.end(), by_mean)) std::stable_sort(cs.begin(), cs.end(), by_mean);
}

}  // namespace detail

// fastdigest's TDigest::merge_digests(digests, Some(max_size)). Empty inputs keep their slot in the pairwise
// merge order, as there.
inline Digest merge_digests(const std::vector<const Digest*>& digests, size_t max_size) {
    using detail::Centroid;
    Digest result;
    size_t n_centroids = 0;
    for (const Digest* d : digests) n_centroids += d->means.size();
    if (n_centroids == 0) return result;

    // Two buffers the pairwise passes ping-pong between, uninitialised or left from this thread's last merge (every
    // slot is written before it is read).
    detail::Scratch buffers(2 * n_centroids);
    std::vector<size_t> starts;
    starts.reserve(digests.size());
    unsigned __int128 count = 0, max_count = 0;
    double mass = 0.0;
    size_t start = 0;
    for (const Digest* d : digests) {
        count += d->count;
        max_count = std::max(max_count, d->count);
        starts.push_back(start);
        if (d->mass > 0.0) {
            mass += d->mass;
            Centroid* out = buffers.get() + start;
            const double* means = d->means.data();
            const double* weights = d->weights.data();
            for (size_t i = 0; i < d->means.size(); ++i) out[i] = {means[i], weights[i]};
            start += d->means.size();
        }
    }

    // fastdigest's pairwise merge passes over the digests' runs (starts[]), ping-ponging between two buffers.
    Centroid* src = buffers.get();
    Centroid* dst = buffers.get() + n_centroids;
    const size_t n = start;
    size_t per_block = 1;
    const size_t runs = starts.size();
    while (per_block < runs) {
        auto end_of = [&](size_t run) { return run < runs ? starts[run] : n; };
        for (size_t i = 0; i < runs; i += per_block * 2) {
            size_t first = starts[i];
            if (i + per_block >= runs) {
                std::copy(src + first, src + n, dst + first);  // the last block, unpaired at this level
                continue;
            }
            size_t middle = starts[i + per_block], last = end_of(i + 2 * per_block);
            size_t next = i + 2 * per_block;  // the next pair, merged in the same loop when it is a pair
            if (next + per_block < runs) {
                detail::merge_two(src, dst, first, middle, last, starts[next], starts[next + per_block],
                                  end_of(next + 2 * per_block));
                i = next;
            } else {
                detail::merge_runs(src, dst, first, middle, last);
            }
        }
        std::swap(src, dst);
        per_block *= 2;
    }
    if (n == 0) return result;  // every input had mass <= 0 (not reachable from valid summaries)

    std::vector<Centroid> compressed;
    compressed.reserve(max_size + 1);
    double k_limit = 1.0;
    const double size = static_cast<double>(max_size);
    double q_limit_times_mass = detail::k_to_q(k_limit, size) * mass;

    auto add = [](Centroid& c, double sum, double weight) {
        double new_sum = sum + c.weight * c.mean;
        double new_weight = c.weight + weight;
        c.weight = new_weight;
        c.mean = new_sum / new_weight;
    };

    Centroid curr = src[0];
    double weight_so_far = curr.weight;
    double sums_to_merge = 0.0, weights_to_merge = 0.0;
    for (size_t i = 1; i < n; ++i) {
        const Centroid& c = src[i];
        weight_so_far += c.weight;
        if (weight_so_far <= q_limit_times_mass) {
            sums_to_merge += c.mean * c.weight;
            weights_to_merge += c.weight;
        } else {
            add(curr, sums_to_merge, weights_to_merge);
            sums_to_merge = 0.0;
            weights_to_merge = 0.0;
            compressed.push_back(curr);
            q_limit_times_mass = detail::k_to_q(k_limit, size) * mass;
            k_limit += 1.0;
            curr = c;
        }
    }
    add(curr, sums_to_merge, weights_to_merge);
    compressed.push_back(curr);
    detail::sort_by_mean(compressed);

    result.means.reserve(compressed.size());
    result.weights.reserve(compressed.size());
    for (const Centroid& c : compressed) {
        result.means.push_back(c.mean);
        result.weights.push_back(c.weight);
    }
    result.mass = mass;
    result.count = count;
    // maybe_recompute_totals: fastdigest re-adds the weights when the count crosses a multiple of 10^7.
    const unsigned __int128 thresh = 10000000;
    if (count / thresh > max_count / thresh) {
        double m = 0.0;
        for (double w : result.weights) m += w;
        result.mass = m;
    }
    return result;
}

// fastdigest's merge_sorted(self, values): its TDigest.batch_update (and from_values, into an empty digest) of finite
// values already in ascending order (merge_unsorted's stable sort); the digest's centroids and the values taken in one
// ascending pass (a value goes before a centroid of the same mean), compressed as they go.
inline Digest merge_sorted(const Digest& self, const double* values, size_t n, size_t max_size) {
    if (n == 0) return self;
    Digest result;
    result.count = self.count + n;
    result.mass = self.mass + static_cast<double>(n);
    const double size = static_cast<double>(max_size);
    double k_limit = 1.0;
    double q_limit_times_mass = detail::k_to_q(k_limit, size) * result.mass;
    k_limit += 1.0;

    std::vector<detail::Centroid> compressed;
    compressed.reserve(max_size + 1);
    size_t ci = 0, vi = 0;
    const size_t nc = self.means.size();
    auto next_one = [&]() -> detail::Centroid {  // the smaller of the next centroid and the next value
        if (ci < nc && (vi == n || self.means[ci] < values[vi])) {
            detail::Centroid c{self.means[ci], self.weights[ci]};
            ++ci;
            return c;
        }
        return detail::Centroid{values[vi++], 1.0};
    };
    auto add = [](detail::Centroid& c, double sum, double weight) {
        double new_sum = sum + c.weight * c.mean;
        double new_weight = c.weight + weight;
        c.weight = new_weight;
        c.mean = new_sum / new_weight;
    };
    detail::Centroid curr = next_one();
    double weight_so_far = curr.weight;
    double sums_to_merge = 0.0, weights_to_merge = 0.0;
    while (ci < nc || vi < n) {
        detail::Centroid next = next_one();
        const double next_sum = next.mean * next.weight;
        weight_so_far += next.weight;
        if (weight_so_far <= q_limit_times_mass) {
            sums_to_merge += next_sum;
            weights_to_merge += next.weight;
        } else {
            add(curr, sums_to_merge, weights_to_merge);
            sums_to_merge = 0.0;
            weights_to_merge = 0.0;
            compressed.push_back(curr);
            q_limit_times_mass = detail::k_to_q(k_limit, size) * result.mass;
            k_limit += 1.0;
            curr = next;
        }
    }
    add(curr, sums_to_merge, weights_to_merge);
    compressed.push_back(curr);
    detail::sort_by_mean(compressed);
    result.means.reserve(compressed.size());
    result.weights.reserve(compressed.size());
    for (const detail::Centroid& c : compressed) {
        result.means.push_back(c.mean);
        result.weights.push_back(c.weight);
    }
    // maybe_recompute_totals(self.count): the weights re-added when the count crossed a multiple of 10^7.
    const unsigned __int128 thresh = 10000000;
    if (result.count / thresh > self.count / thresh) {
        double m = 0.0;
        for (double w : result.weights) m += w;
        result.mass = m;
    }
    return result;
}

// fastdigest's TDigest.from_values(values, max_centroids) for finite values already in ascending order, as
// merge_unsorted sorts them (a stable sort: -0.0 and 0.0 keep their input order): merge_sorted into an empty digest.
inline Digest digest_of_sorted(const double* values, size_t n, size_t max_size) {
    return merge_sorted(Digest(), values, n, max_size);
}

}  // namespace treemetry

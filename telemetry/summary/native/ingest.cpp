// See ingest.hpp. The arithmetic is the one Summary.from_arrays did in numpy and fastdigest (kept as the oracle in
// tests/summary_oracle.py): numpy's pairwise sums, lexsort's tie order, fastdigest's from_values; so an ingested
// core encodes to the same bytes as the Python ingest gave (tests/test_native_ingest.py).
#include "ingest.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "fsum.hpp"

namespace treemetry {

using namespace roaring::api;

namespace {

// numpy's pairwise summation of a contiguous float64 array (numpy/_core/src/umath/loops_utils.h.src,
// DOUBLE_pairwise_sum): what ndarray.sum() and mean() compute for one contiguous axis.
double pairwise_sum(const double* a, size_t n) {
    if (n < 8) {
        double res = 0.0;
        for (size_t i = 0; i < n; ++i) res += a[i];
        return res;
    }
    if (n <= 128) {
        double r[8];
        for (int j = 0; j < 8; ++j) r[j] = a[j];
        size_t i = 8;
        for (; i < n - (n % 8); i += 8)
            for (int j = 0; j < 8; ++j) r[j] += a[i + j];
        double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; ++i) res += a[i];
        return res;
    }
    size_t n2 = n / 2;
    n2 -= n2 % 8;
    return pairwise_sum(a, n2) + pairwise_sum(a + n2, n - n2);
}

// ndarray.sum(): the add reduction starts from its identity, 0.0 (so a sum of -0.0s is 0.0).
double numpy_sum(const std::vector<double>& a) { return 0.0 + pairwise_sum(a.data(), a.size()); }

}  // namespace

Core from_arrays(const double* values, const int64_t* sources, size_t n, int64_t first_ns, int64_t last_ns,
                 uint32_t k, uint32_t max_centroids) {
    if (max_centroids < 2)
        throw std::invalid_argument("max_centroids must be >= 2, got " + std::to_string(max_centroids));
    Core c;
    c.k = k;
    c.sketch.max_centroids = max_centroids;
    if (n == 0) return c;

    if (n > UINT32_MAX) throw std::invalid_argument("more than 2**32 values in one summary");
    std::vector<uint32_t> ids(n);
    for (size_t i = 0; i < n; ++i) {
        int64_t s = sources[i];
        if (s < 0 || s > static_cast<int64_t>(UINT32_MAX))
            throw std::invalid_argument("sources must be integers in [0, 2**32)");
        ids[i] = static_cast<uint32_t>(s);
    }
    c.first_ns = first_ns;
    c.last_ns = last_ns;
    roaring_bitmap_add_many(c.sources.own(), n, ids.data());
    roaring_bitmap_run_optimize(c.sources.own());  // pyroaring's BitMap(values) optimises on construction

    // The finite values within +-MAX_MAGNITUDE and their sources, in input order (numpy's values[finite_mask]).
    std::vector<double> finite;
    std::vector<uint32_t> finite_ids;
    finite.reserve(n);
    finite_ids.reserve(n);
    for (size_t i = 0; i < n; ++i) {
        if (std::fabs(values[i]) <= MAX_MAGNITUDE) {  // NaN fails it too
            finite.push_back(values[i]);
            finite_ids.push_back(ids[i]);
        } else {
            ++c.nonfinite_count;
            roaring_bitmap_add(c.nonfinite_sources.own(), ids[i]);
        }
    }
    if (c.nonfinite_count) roaring_bitmap_run_optimize(c.nonfinite_sources.own());
    const size_t m = finite.size();
    if (m == 0) return c;

    // count, sum, mean = sum / count, m2 = sum of squared deviations: numpy's reductions, in its order.
    c.count = m;
    c.sum = numpy_sum(finite);
    c.mean = c.sum / static_cast<double>(m);
    std::vector<double> squares(m);
    for (size_t i = 0; i < m; ++i) {
        double d = finite[i] - c.mean;
        squares[i] = d * d;
    }
    c.m2 = numpy_sum(squares);

    // np.lexsort((sources, -values)) / ((sources, values)): value, then source, then position (a stable sort).
    auto descending = [&](size_t a, size_t b) {
        if (finite[a] != finite[b]) return finite[a] > finite[b];
        if (finite_ids[a] != finite_ids[b]) return finite_ids[a] < finite_ids[b];
        return a < b;
    };
    auto ascending = [&](size_t a, size_t b) {
        if (finite[a] != finite[b]) return finite[a] < finite[b];
        if (finite_ids[a] != finite_ids[b]) return finite_ids[a] < finite_ids[b];
        return a < b;
    };
    size_t hi = 0, lo = 0;
    for (size_t i = 1; i < m; ++i) {
        if (descending(i, hi)) hi = i;
        if (ascending(i, lo)) lo = i;
    }
    c.max = finite[hi];
    c.argmax = finite_ids[hi];
    c.min = finite[lo];
    c.argmin = finite_ids[lo];
    if (k) {
        const size_t take = std::min<size_t>(k, m);
        std::vector<size_t> order(m);
        std::iota(order.begin(), order.end(), size_t{0});
        std::partial_sort(order.begin(), order.begin() + take, order.end(), descending);
        for (size_t i = 0; i < take; ++i) c.top.emplace_back(finite[order[i]], finite_ids[order[i]]);
        std::iota(order.begin(), order.end(), size_t{0});
        std::partial_sort(order.begin(), order.begin() + take, order.end(), ascending);
        for (size_t i = 0; i < take; ++i) c.bottom.emplace_back(finite[order[i]], finite_ids[order[i]]);
    }

    // fastdigest's from_values: a stable sort, then one compressing pass.
    std::stable_sort(finite.begin(), finite.end());
    c.sketch.digest = digest_of_sorted(finite.data(), m, max_centroids);
    c.sketch.has_digest = true;
    return c;
}

namespace {

// heapq.nsmallest(k, current + new, key): sorted by `less`, ties kept in the order of current then new.
Pairs keep(const Pairs& current, const std::vector<Pair>& fresh, size_t k, bool (*less)(const Pair&, const Pair&)) {
    Pairs all(current);
    all.insert(all.end(), fresh.begin(), fresh.end());
    std::stable_sort(all.begin(), all.end(), less);
    if (all.size() > k) all.resize(k);
    return all;
}

bool desc_key_lt(const Pair& a, const Pair& b) {  // (-value, source) ascending
    if (a.first != b.first) return a.first > b.first;
    return a.second < b.second;
}

bool asc_key_lt(const Pair& a, const Pair& b) {  // (value, source) ascending
    if (a.first != b.first) return a.first < b.first;
    return a.second < b.second;
}

}  // namespace

bool add_many(Core& c, const double* values, size_t n, uint32_t source, int64_t time_ns) {
    if (n == 0) return true;
    std::vector<double> finite;
    finite.reserve(n);
    bool negative_zero = false, positive_zero = false;
    for (size_t i = 0; i < n; ++i) {
        if (std::fabs(values[i]) <= MAX_MAGNITUDE) {  // NaN fails it too
            finite.push_back(values[i]);
            if (values[i] == 0.0) (std::signbit(values[i]) ? negative_zero : positive_zero) = true;
        }
    }
    const size_t m = finite.size();
    if (c.k && c.k < m && negative_zero && positive_zero) return false;  // np.partition's tie order: Python's path

    c.sketch.collapse();  // as the Python ingest saw the sketch: its folds merged first
    roaring_bitmap_add(c.sources.own(), source);
    if (c.first_ns == 0 || time_ns < c.first_ns) c.first_ns = time_ns;
    if (time_ns > c.last_ns) c.last_ns = time_ns;
    if (m < n) {
        c.nonfinite_count += n - m;
        roaring_bitmap_add(c.nonfinite_sources.own(), source);
    }
    if (m == 0) return true;

    // _combine_moments(n, fsum((sum, finite.sum())), finite.mean(), square(finite - mean).sum()), in its order
    const double batch_sum = numpy_sum(finite);
    const double mean = batch_sum / static_cast<double>(m);
    std::vector<double> squares(m);
    for (size_t i = 0; i < m; ++i) {
        double d = finite[i] - mean;
        squares[i] = d * d;
    }
    const double m2 = numpy_sum(squares);
    Fsum total_sum;
    total_sum.add(c.sum);
    total_sum.add(batch_sum);
    const uint64_t total = c.count + m;
    const double delta = mean - c.mean;
    const double count_d = static_cast<double>(c.count), m_d = static_cast<double>(m);
    const double total_d = static_cast<double>(total);
    c.m2 = std::max(0.0, c.m2 + m2 + delta * delta * count_d * m_d / total_d);
    c.mean = c.mean + delta * m_d / total_d;
    c.count = total;
    c.sum = total_sum.result();

    // numpy's argmin / argmax: the first of the smallest / largest
    size_t lo = 0, hi = 0;
    for (size_t i = 1; i < m; ++i) {
        if (finite[i] < finite[lo]) lo = i;
        if (finite[i] > finite[hi]) hi = i;
    }
    if (finite[lo] < c.min || (finite[lo] == c.min && source < c.argmin)) {
        c.min = finite[lo];
        c.argmin = source;
    }
    if (finite[hi] > c.max || (finite[hi] == c.max && source < c.argmax)) {
        c.max = finite[hi];
        c.argmax = source;
    }
    if (c.k) {
        const size_t k = std::min<size_t>(c.k, m);
        std::vector<double> sorted(finite);
        std::stable_sort(sorted.begin(), sorted.end());
        std::vector<Pair> top, bottom;
        for (size_t i = 0; i < k; ++i) {
            top.emplace_back(sorted[m - k + i], source);
            bottom.emplace_back(sorted[i], source);
        }
        if (k == m) {  // no partition: the values in their input order
            top.clear();
            bottom.clear();
            for (double v : finite) {
                top.emplace_back(v, source);
                bottom.emplace_back(v, source);
            }
        }
        c.top = keep(c.top, top, c.k, desc_key_lt);
        c.bottom = keep(c.bottom, bottom, c.k, asc_key_lt);
    }

    // Sketch.add_many: fastdigest's from_values into an empty sketch, else its batch_update
    std::stable_sort(finite.begin(), finite.end());
    const bool held = c.sketch.has_digest && !c.sketch.digest.empty();  // Python's `_digest is not None`
    c.sketch.digest = held ? merge_sorted(c.sketch.digest, finite.data(), m, c.sketch.max_centroids)
                           : digest_of_sorted(finite.data(), m, c.sketch.max_centroids);
    c.sketch.has_digest = true;
    return true;
}

}  // namespace treemetry

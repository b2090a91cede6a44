// Windows: see table.hpp.
#include "table.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <new>
#include <stdexcept>

namespace treemetry {

using namespace roaring::api;

namespace {

void put(std::string& out, uint64_t v, size_t bytes) {
    for (size_t i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

std::vector<uint32_t> members(const roaring_bitmap_t* r) {
    std::vector<uint32_t> out(roaring_bitmap_get_cardinality(r));
    roaring_bitmap_to_uint32_array(r, out.data());
    return out;
}

// A window key's (job, attempt) prefix (window_prefix's layout): the key of its group.
std::string group_key(const std::string& key) {
    uint32_t job = 0;
    for (size_t i = 0; i < 4; ++i) job |= static_cast<uint32_t>(static_cast<unsigned char>(key[i])) << (8 * i);
    return key.substr(0, 4 + static_cast<size_t>(job) + 8);
}

std::string group_of(const std::string& job, uint64_t attempt) {
    std::string key;
    put(key, job.size(), 4);
    key += job;
    put(key, attempt, 8);
    return key;
}

}  // namespace

std::string window_prefix(const std::string& job, uint64_t attempt, uint64_t index, uint32_t width_ms) {
    std::string key;
    key.reserve(job.size() + 56);
    put(key, job.size(), 4);  // length-prefixed: no job and metric can run into each other
    key += job;
    put(key, attempt, 8);
    put(key, index, 8);
    put(key, width_ms, 4);
    return key;
}


const Slot& Windows::at(uint32_t slot) const {
    if (slot >= slots_.size() || !slots_[slot].used) throw std::out_of_range("no window in slot " + std::to_string(slot));
    return slots_[slot];
}

Slot& Windows::at(uint32_t slot) {
    return const_cast<Slot&>(static_cast<const Windows*>(this)->at(slot));
}

uint32_t Windows::create(ByMetric& metrics, const std::string& prefix, const std::string& metric,
                         uint32_t expected) {
    uint32_t slot;
    if (!free_.empty()) {
        slot = free_.back();
        free_.pop_back();
    } else {
        if (slots_.size() >= UINT32_MAX) throw std::length_error("too many windows");
        slot = static_cast<uint32_t>(slots_.size());
        slots_.emplace_back();
    }
    Slot& s = slots_[slot];
    s.key = prefix + metric;
    s.prefix = static_cast<uint32_t>(prefix.size());
    s.used = true;
    s.expected = expected;
    metrics.emplace(metric, slot);
    ++count_;
    return slot;
}

std::pair<uint32_t, bool> Windows::slot_in(ByMetric& metrics, const std::string& prefix, const std::string& metric,
                                           uint32_t expected) {
    auto found = metrics.find(metric);
    if (found != metrics.end()) {
        expect(found->second, expected);
        return {found->second, false};
    }
    return {create(metrics, prefix, metric, expected), true};
}

std::pair<uint32_t, bool> Windows::slot_of(const std::string& job, uint64_t attempt, const std::string& metric,
                                           uint64_t index, uint32_t width_ms, uint32_t expected) {
    std::string prefix = window_prefix(job, attempt, index, width_ms);
    return slot_in(index_[prefix], prefix, metric, expected);
}

void Windows::expect(uint32_t slot, uint32_t expected) {
    Slot& s = at(slot);
    if (expected > s.expected) s.expected = expected;
}

Refused Windows::offer_core(uint32_t slot, const Core& core, uint64_t origin, uint32_t index, bool& became_pending,
                            uint64_t& added) {
    Slot& s = at(slot);
    Refused verdict;
    verdict.slot = slot;
    became_pending = false;
    added = 0;
    const roaring_bitmap_t* sources = core.sources.get();
    if (!roaring_bitmap_intersect(s.sources.get(), sources)) {
        roaring_bitmap_or_inplace(s.sources.get(), sources);
        added = roaring_bitmap_get_cardinality(sources);
        s.charged += added;
        ++s.version;
        became_pending = s.pending.empty();
        s.pending.push_back(Entry{Core(core), origin, index});
        verdict.verdict = ACCEPTED;
        return verdict;
    }
    Bitmap overlap(roaring_bitmap_and(s.sources.get(), sources));
    verdict.verdict =
        roaring_bitmap_get_cardinality(overlap.get()) == roaring_bitmap_get_cardinality(sources) ? DUPLICATE : OVERLAP;
    verdict.overlap = members(overlap.get());
    verdict.sources = roaring_bitmap_get_cardinality(sources);
    return verdict;
}

UnitOffer Windows::offer_unit(UnitIn& unit, uint64_t origin) {
    UnitOffer out;
    ByMetric* metrics = nullptr;  // the windows of the step of the window before, and that step's prefix
    std::string prefix;
    const WindowIn* before = nullptr;
    for (size_t pos = 0; pos < unit.windows.size(); ++pos) {
        WindowIn& w = unit.windows[pos];
        if (!w.fast) throw std::invalid_argument("offer_unit takes only units whose every window was read fast");
        if (before == nullptr || w.index != before->index || w.width_ms != before->width_ms ||
            w.attempt != before->attempt || w.job != before->job) {
            prefix = window_prefix(w.job, w.attempt, w.index, w.width_ms);
            metrics = &index_[prefix];  // a node's value: its address holds while others are added
        }
        before = &w;
        auto [slot, created] = slot_in(*metrics, prefix, w.metric, w.expected);
        if (created) out.created.emplace_back(pos, slot);
        Slot& s = slots_[slot];
        const roaring_bitmap_t* sources = w.core.sources.get();
        if (!roaring_bitmap_intersect(s.sources.get(), sources)) {
            roaring_bitmap_or_inplace(s.sources.get(), sources);
            uint64_t n = roaring_bitmap_get_cardinality(sources);
            s.charged += n;
            out.added_sources += n;
            ++s.version;
            if (s.pending.empty()) {
                out.became_pending.push_back(slot);
                // a window takes as many children's parts as the one before, up to kPartsHintMax: one hostile
                // child's window of thousands of one-source parts must not make every window after it reserve
                // that much (600 windows x 16,384 parts was 2.8 GB of address space, outside the window budget)
                s.pending.reserve(std::min(parts_hint_, kPartsHintMax));
            }
            if (w.late) out.late.push_back(slot);
            s.pending.push_back(Entry{std::move(w.core), origin, static_cast<uint32_t>(pos)});
            ++out.accepted;
            continue;
        }
        Bitmap overlap(roaring_bitmap_and(s.sources.get(), sources));
        Refused r;
        r.pos = pos;
        r.slot = slot;
        r.verdict = roaring_bitmap_get_cardinality(overlap.get()) == roaring_bitmap_get_cardinality(sources)
                        ? DUPLICATE
                        : OVERLAP;
        r.overlap = members(overlap.get());
        r.sources = roaring_bitmap_get_cardinality(sources);
        out.refused.push_back(std::move(r));
    }
    return out;
}

Batch Windows::take(uint32_t slot) {
    Batch out;
    out.entries.swap(at(slot).pending);
    parts_hint_ = out.entries.size();
    return out;
}

void Windows::watch(uint32_t slot, bool on) {
    Slot& s = at(slot);
    if (s.watched == on) return;
    std::string gkey = group_key(s.key);
    if (on) {
        auto [it, created] = groups_.try_emplace(gkey);
        Group& g = it->second;
        if (created) {
            uint32_t job = static_cast<uint32_t>(gkey.size() - 12);
            g.job = gkey.substr(4, job);
            for (size_t i = 0; i < 8; ++i)
                g.attempt |= static_cast<uint64_t>(static_cast<unsigned char>(gkey[4 + job + i])) << (8 * i);
        }
        s.watch_pos = static_cast<uint32_t>(g.watched.size());
        g.watched.push_back(slot);
        s.watched = true;
        return;
    }
    auto it = groups_.find(gkey);
    Group& g = it->second;
    uint32_t last = g.watched.back();  // swap-remove: the last watched window takes its place
    g.watched[s.watch_pos] = last;
    slots_[last].watch_pos = s.watch_pos;
    g.watched.pop_back();
    if (g.watched.empty()) groups_.erase(it);
    s.watched = false;
}

std::vector<std::pair<std::string, uint64_t>> Windows::watched_jobs() const {
    std::vector<std::pair<std::string, uint64_t>> out;
    for (const auto& [_, g] : groups_) {
        for (uint32_t slot : g.watched) {
            if (!slots_[slot].pending.empty()) {
                out.emplace_back(g.job, g.attempt);
                break;
            }
        }
    }
    return out;
}

namespace {

// The width of a window's key (window_prefix's layout: its last 4 bytes before the metric).
uint32_t width_of(const Slot& s) {
    uint32_t width = 0;
    for (size_t i = 0; i < 4; ++i)
        width |= static_cast<uint32_t>(static_cast<unsigned char>(s.key[s.prefix - 4 + i])) << (8 * i);
    return width;
}

// root_complete's rule for a step window: every rank of a world of `world` ranks, and none beyond it.
bool holds_world(const roaring_bitmap_t* sources, uint64_t world) {
    return world > 0 && roaring_bitmap_get_cardinality(sources) >= world && roaring_bitmap_maximum(sources) < world;
}

}  // namespace

std::vector<uint32_t> Windows::complete(const std::string& job, uint64_t attempt, const roaring_bitmap_t* covered,
                                        int64_t world, bool buckets) const {
    std::vector<uint32_t> out;
    auto it = groups_.find(group_of(job, attempt));
    if (it == groups_.end()) return out;
    for (uint32_t slot : it->second.watched) {
        const Slot& s = slots_[slot];
        if (s.pending.empty()) continue;
        if (world >= 0 && width_of(s) == 0) {
            if (holds_world(s.sources.get(), s.expected ? s.expected : static_cast<uint64_t>(world)))
                out.push_back(slot);
            continue;
        }
        if (!buckets) continue;
        if (covered == nullptr ? !roaring_bitmap_is_empty(s.sources.get())
                               : roaring_bitmap_is_subset(covered, s.sources.get()))
            out.push_back(slot);
    }
    return out;
}

std::vector<size_t> Windows::missing(const UnitIn& unit) const {
    std::vector<size_t> out;
    const ByMetric* metrics = nullptr;  // the windows held of the step of the window before (none: nullptr)
    const WindowIn* before = nullptr;
    for (size_t pos = 0; pos < unit.windows.size(); ++pos) {
        const WindowIn& w = unit.windows[pos];
        if (!w.fast) throw std::invalid_argument("missing takes only units whose every window was read fast");
        if (before == nullptr || w.index != before->index || w.width_ms != before->width_ms ||
            w.attempt != before->attempt || w.job != before->job) {
            auto step = index_.find(window_prefix(w.job, w.attempt, w.index, w.width_ms));
            metrics = step == index_.end() ? nullptr : &step->second;
        }
        before = &w;
        if (metrics == nullptr || metrics->find(w.metric) == metrics->end()) out.push_back(pos);
    }
    return out;
}

bool Windows::restore(uint32_t slot, Batch& batch) {
    Slot& s = at(slot);
    bool was_empty = s.pending.empty();
    if (!batch.entries.empty()) {
        batch.entries.insert(batch.entries.end(), std::make_move_iterator(s.pending.begin()),
                             std::make_move_iterator(s.pending.end()));
        s.pending.swap(batch.entries);
        batch.entries.clear();
    }
    return was_empty && !s.pending.empty();
}

void Windows::add_sources(uint32_t slot, const roaring_bitmap_t* sources) {
    Slot& s = at(slot);
    roaring_bitmap_or_inplace(s.sources.get(), sources);
    ++s.version;
}

void Windows::remove(uint32_t slot) {
    watch(slot, false);
    Slot& s = at(slot);
    auto step = index_.find(s.key.substr(0, s.prefix));
    step->second.erase(s.key.substr(s.prefix));
    if (step->second.empty()) index_.erase(step);
    --count_;
    s = Slot();
    free_.push_back(slot);
}

void Windows::remove_sources(uint32_t slot, const roaring_bitmap_t* sources) {
    Slot& s = at(slot);
    roaring_bitmap_andnot_inplace(s.sources.get(), sources);
    ++s.version;
}

namespace {

// The union of a window's children's sources, run-optimised as the encoder would (Summary.to_bytes), but before
// the merge copies it: the union of a rack's or a root's children is a few contiguous ranges, which a many-way
// union leaves as bitset or array containers (the root's 16,384 ranks: 8 KB). Run-optimised, everything that reads
// the merged sources before the encode (the root's figures, the summary's fields) reads a few bytes: the root's
// `figures` of such a window took 89 us, 34 once optimised (docs/scale.md, "The root's step, counted").
// The root's usual union, one contiguous range of more than 4,096 sources within one container, is one run once
// optimised; run_optimize found that by counting the bitset's runs, ~50,000 instructions a merge (libgcc's
// software popcount: the module is built for baseline x86-64), so that range is made as the run directly: the
// very container run_optimize leaves (one run; a range of more than two values is a run), so the same bytes.
Bitmap optimized_union(const std::vector<const roaring_bitmap_t*>& bitmaps) {
    Bitmap all = union_of(bitmaps);
    const uint64_t count = roaring_bitmap_get_cardinality(all.get());
    if (count > 4096) {
        const uint32_t lo = roaring_bitmap_minimum(all.get()), hi = roaring_bitmap_maximum(all.get());
        if ((lo >> 16) == (hi >> 16) && uint64_t(hi) - lo + 1 == count) {
            Bitmap run(roaring_bitmap_from_range(lo, uint64_t(hi) + 1, 1));
            if (!run) throw std::bad_alloc();
            return run;
        }
    }
    roaring_bitmap_run_optimize(all.get());
    return all;
}

// The last union a thread's merge_batch made, and the children's sources it was made of: the next window's children,
// when they hold those very bitmaps in the same order, have that union. A rack's windows of one step are merged one
// after another on its flush thread from the same 64 children's units, whose windows share one parse of the child's
// sources (SourcesMemo), so one union serves every metric of a step instead of 300 (or_many and run_optimize: ~12 M
// of a rack step's 215.6 M instructions; docs/scale.md, session 44). Holding the inputs keeps them alive and unchanged:
// a SharedBitmap is written only through own(), which copies one that another holder (this memo) shares, so a bitmap
// found `same` here still has the value the union was made of, and no other bitmap can take its address meanwhile.
struct UnionMemo {
    std::vector<SharedBitmap> inputs;
    Bitmap union_;

    bool holds(const std::vector<Entry>& entries) const {
        if (!union_ || inputs.size() != entries.size()) return false;
        for (size_t i = 0; i < entries.size(); ++i)
            if (!inputs[i].same(entries[i].core.sources)) return false;
        return true;
    }
};

}  // namespace

Core merge_batch(Batch& batch) {
    if (batch.entries.empty()) throw std::invalid_argument("a window with nothing to merge");
    if (batch.entries.size() == 1) return clone(batch.entries[0].core);
    std::vector<Core*> cores;
    cores.reserve(batch.entries.size());
    for (Entry& e : batch.entries) {
        check_compatible(batch.entries[0].core, e.core);
        cores.push_back(&e.core);
    }
    thread_local UnionMemo memo;
    if (!memo.holds(batch.entries)) {
        std::vector<const roaring_bitmap_t*> bitmaps;
        bitmaps.reserve(batch.entries.size());
        for (const Entry& e : batch.entries) bitmaps.push_back(e.core.sources.get());
        memo.union_.reset();  // never a union beside inputs it was not made of, whatever throws below
        memo.inputs.clear();
        Bitmap made = optimized_union(bitmaps);
        for (const Entry& e : batch.entries) memo.inputs.push_back(e.core.sources);
        memo.union_ = std::move(made);
    }
    return merge_all(cores, memo.union_.get());
}

namespace {

// repr(v) for a finite double, as CPython writes it (float_repr_style 'short': PyOS_double_to_string(v, 'r', 0,
// Py_DTSF_ADD_DOT_0)): the shortest digits that round-trip (to_chars' shortest form is those very digits: the
// shortest, the nearest of them to v), positional while the decimal point falls within -4 < decpt <= 16, else
// d.ddde+XX with at least two exponent digits; ".0" after an integral positional value.
void append_repr(std::string& out, double v) {
    char buf[32];
    auto done = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
    const char* p = buf;
    const char* end = done.ptr;
    if (*p == '-') {
        out.push_back('-');
        ++p;
    }
    char digits[24];
    size_t n = 0;
    for (; p < end && *p != 'e'; ++p)
        if (*p != '.') digits[n++] = *p;
    int exp = 0;
    std::from_chars(p + 1 + (p[1] == '+'), end, exp);  // "e+XX" or "e-XX"
    const int decpt = exp + 1;  // the digits' decimal point: v = 0.d1d2... x 10^decpt
    if (decpt > -4 && decpt <= 16) {
        if (decpt <= 0) {
            out.append("0.");
            out.append(static_cast<size_t>(-decpt), '0');
            out.append(digits, n);
        } else if (static_cast<size_t>(decpt) >= n) {
            out.append(digits, n);
            out.append(static_cast<size_t>(decpt) - n, '0');
            out.append(".0");
        } else {
            out.append(digits, static_cast<size_t>(decpt));
            out.push_back('.');
            out.append(digits + decpt, n - static_cast<size_t>(decpt));
        }
        return;
    }
    out.push_back(digits[0]);
    if (n > 1) {
        out.push_back('.');
        out.append(digits + 1, n - 1);
    }
    out.push_back('e');
    out.push_back(exp < 0 ? '-' : '+');
    int mag = exp < 0 ? -exp : exp;
    if (mag < 10) out.push_back('0');
    out.append(std::to_string(mag));
}

}  // namespace

bool pairs_json(const std::vector<std::pair<double, int64_t>>& pairs, std::string& out) {
    out.clear();
    out.push_back('[');
    for (size_t i = 0; i < pairs.size(); ++i) {
        if (!std::isfinite(pairs[i].first)) return false;
        if (i) out.append(", ");
        out.push_back('[');
        append_repr(out, pairs[i].first);
        out.append(", ");
        out.append(std::to_string(pairs[i].second));
        out.push_back(']');
    }
    out.push_back(']');
    return true;
}

}  // namespace treemetry

// A collector's pending windows held natively (issue 29, docs/scale.md "One tier alone"): per window, the union of
// the sources it accepted and the children's cores waiting to be merged, so that a child's unit is placed in one
// call and no Python object is made per child window. The Python WindowTable (collectors/delivery/windows.py) keeps
// one Window per window (its lifecycle, deadlines, what is in flight) and a slot number into this table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "core.hpp"
#include "unit.hpp"

namespace treemetry {

// One child's part of one window: its core, the unit it came in (an id the Python table maps to (sender, seq)) and
// its position in that unit (to reject it back down by index).
struct Entry {
    Core core;
    uint64_t origin = 0;
    uint32_t index = 0;
};

// What a window handed on (take) or let go (drop): its entries, until they are settled.
struct Batch {
    std::vector<Entry> entries;
};

struct Slot {
    std::string key;  // its step's prefix (window_prefix), then the metric
    uint32_t prefix = 0;  // the prefix's length in `key`
    Bitmap sources = empty_bitmap();
    std::vector<Entry> pending;
    uint64_t charged = 0;  // sources accepted over the window's life (what its table charges it, per source)
    uint64_t version = 0;  // bumped whenever `sources` changes
    uint32_t expected = 0;
    bool used = false;
    bool watched = false;  // asked for completeness with its job's others (Windows::complete), until sealed
    uint32_t watch_pos = 0;  // its place in its group's `watched`
};

// The watched windows of one job and attempt: what Windows::complete asks in one call per flush.
struct Group {
    std::string job;
    uint64_t attempt = 0;
    std::vector<uint32_t> watched;
};

enum Verdict : int { ACCEPTED = 0, DUPLICATE = 1, OVERLAP = 2 };

// A window of a unit not accepted: its position, slot, verdict and the sources it shares with the window.
struct Refused {
    size_t pos = 0;
    uint32_t slot = 0;
    Verdict verdict = OVERLAP;
    std::vector<uint32_t> overlap;
    uint64_t sources = 0;  // how many sources the part has
};

struct UnitOffer {
    std::vector<std::pair<size_t, uint32_t>> created;  // (position in the unit, slot): windows new to the table
    std::vector<uint32_t> became_pending;              // slots that held nothing pending before this unit
    std::vector<Refused> refused;
    std::vector<uint32_t> late;  // per late delta accepted, its window's slot (the table counts its late parts)
    size_t accepted = 0;
    uint64_t added_sources = 0;
};

// A window's key in the table is its prefix, the job (as on the wire), attempt, index and width, which every metric of
// that step or bucket shares, then its metric.
std::string window_prefix(const std::string& job, uint64_t attempt, uint64_t index, uint32_t width_ms);

class Windows {
public:
    // Every window of `unit` (each read fast: keys and summaries checked) offered in order: accepted (its core moved
    // into the window) when its sources are disjoint from the window's, else refused as a duplicate (all held) or an
    // overlap. The unit's cores are consumed (its keys stay).
    UnitOffer offer_unit(UnitIn& unit, uint64_t origin);
    // The slot of a window (created when new, `expected` raised to at least the one given): (slot, created).
    std::pair<uint32_t, bool> slot_of(const std::string& job, uint64_t attempt, const std::string& metric,
                                      uint64_t index, uint32_t width_ms, uint32_t expected);
    void expect(uint32_t slot, uint32_t expected);
    // One part offered alone (a window read by the per-window path): the verdict and overlap; the core is copied.
    Refused offer_core(uint32_t slot, const Core& core, uint64_t origin, uint32_t index, bool& became_pending,
                       uint64_t& added);
    Batch take(uint32_t slot);           // the pending entries, the window holding none after
    void remove(uint32_t slot);          // forget the window (its key may come again as a new window)
    void remove_sources(uint32_t slot, const roaring_bitmap_t* sources);
    // Watch a window (until it is sealed: watch(slot, false), or removed): a collector's unsealed windows, whose
    // completeness is asked per job in one call (complete) instead of once per window and flush tick in Python.
    void watch(uint32_t slot, bool on);
    // The (job, attempt) of every group with a watched window holding pending entries.
    std::vector<std::pair<std::string, uint64_t>> watched_jobs() const;
    // The watched windows of (job, attempt) holding pending entries and every source of `covered` (nullptr: any
    // source at all). With `world` >= 0 (the root's rule, root_complete), a step window (width 0) is complete instead
    // when it holds every source of [0, w) and none beyond, w its expected world or else `world` (never when w is 0);
    // with `buckets` false, no window of another width is.
    std::vector<uint32_t> complete(const std::string& job, uint64_t attempt, const roaring_bitmap_t* covered,
                                   int64_t world = -1, bool buckets = true) const;
    // The positions of a unit's windows (each read fast) that the table does not hold (the root reads those from its
    // store first, when they may be there: collectors/root/reads.py).
    std::vector<size_t> missing(const UnitIn& unit) const;
    // A batch taken (take) whose dispatch failed before anything of it settled (the root's commit): its entries are
    // pending again, ahead of what arrived since; whether the window held nothing pending before. The batch is empty
    // after.
    bool restore(uint32_t slot, Batch& batch);
    // Sources held by a window read back from the root's store (Finaliser.install): its resends are duplicates.
    void add_sources(uint32_t slot, const roaring_bitmap_t* sources);

    const Slot& at(uint32_t slot) const;
    Slot& at(uint32_t slot);
    size_t size() const { return count_; }

private:
    // The windows of one step or bucket of a job's attempt, by metric: a unit's windows (one step's, in a child's
    // unit) are found with one lookup of their prefix and one of each metric in this small map, which the units of
    // one step keep hot, instead of a lookup of a whole key per window in a map of every window held.
    using ByMetric = std::unordered_map<std::string, uint32_t>;
    uint32_t create(ByMetric& metrics, const std::string& prefix, const std::string& metric, uint32_t expected);
    std::pair<uint32_t, bool> slot_in(ByMetric& metrics, const std::string& prefix, const std::string& metric,
                                      uint32_t expected);
    std::unordered_map<std::string, ByMetric> index_;  // by window_prefix
    size_t count_ = 0;
    static constexpr size_t kPartsHintMax = 64;  // a rack's or cluster's children, generously; more just grow
    size_t parts_hint_ = 0;  // the parts the last window taken held: what a window's first part reserves room for
    std::unordered_map<std::string, Group> groups_;  // by the window key's (job, attempt) prefix
    std::vector<Slot> slots_;
    std::vector<uint32_t> free_;
};

// A window's merge of its entries' cores (Summary.merge_all: disjoint by construction); a copy when there is one.
Core merge_batch(Batch& batch);

// json.dumps of (value, source) pairs, as the root's store writes a window's `top` column (collectors/root/store.py):
// the same text (each value as Python's repr(float) writes it: the shortest digits that read back to it), without
// the ~7,000 instructions of Python's float repr per value. False where a value is not finite (json.dumps writes
// NaN and Infinity, which the caller's json.dumps then does). The same text only for float values and integer sources
// below 2**63, as Summary.top() gives (an int value 3 is written 3.0 where json.dumps writes 3, True as 1.0).
bool pairs_json(const std::vector<std::pair<double, int64_t>>& pairs, std::string& out);

}  // namespace treemetry

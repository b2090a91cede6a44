// A tier's intake of one unit in one call (issue 29 item 2): the windows of a telemetry.v1.SummaryBatch read
// straight from its bytes, each summary decoded into a `Core` and its key and size checked, so that a collector
// does no Python work per field and builds no Python message per child window.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core.hpp"

namespace treemetry {

// What the tier accepts on the fast path; anything else is left to its Python checks (which say why).
struct UnitLimits {
    uint32_t k = 8, max_centroids = 200;  // the tree's one summary shape
    uint64_t max_index = 0;               // a step or bucket start beyond it is refused
    uint64_t max_attempt = 0;             // attempts are below it
    uint64_t max_world = 0;               // an expected world size above it is refused
};

// One WindowSummary of the unit. `fast` is false when the window is anything but plain and valid (a malformed or
// odd key, a summary that does not decode or has another shape, a bound exceeded, a field repeated or unknown, a
// `late` that is no bool):
// the caller then judges that window the way it judges every window without this path, so a bad window is refused
// with the same words as before.
struct WindowIn {
    bool fast = false;
    std::string job, metric;  // job: [A-Za-z0-9_.:-]{1,128}; metric: ASCII (its name is checked by the caller)
    uint64_t attempt = 0, index = 0;
    uint32_t width_ms = 0;  // 0: a step window
    uint32_t expected = 0;
    bool late = false;  // a child's late delta (WindowSummary.late): its table counts it (Window.late_parts)
    Core core;
    size_t group = 0;  // windows with equal sources share a group: the caller builds one bitmap per group
};

struct UnitIn {
    std::vector<WindowIn> windows;        // every field-3 WindowSummary, in order
    std::vector<std::string> group_sources;  // per group: its sources, portable roaring bytes
    std::string rest;  // the message without its windows (every other field's bytes, in order)
};

// Reads the windows of the SummaryBatch in `data` (the other fields are copied to `rest`). Throws WireError when the
// message itself is not well formed (the caller falls back to its per-window path for the whole unit).
UnitIn read_unit(const uint8_t* data, size_t n, const UnitLimits& limits);

}  // namespace treemetry

// read_unit: see unit.hpp.
#include "unit.hpp"

#include "wire.hpp"

namespace treemetry {

namespace {

constexpr size_t GROUPS_COMPARED = 8;  // a unit's windows mostly share one child's sources: compare with a few

bool job_name(const Reader& r) {
    size_t n = r.left();
    if (n < 1 || n > 128) return false;
    for (const uint8_t* p = r.data(); p < r.data() + n; ++p) {
        uint8_t c = *p;
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
              c == ':' || c == '-'))
            return false;
    }
    return true;
}

bool ascii(const Reader& r) {
    for (const uint8_t* p = r.data(); p < r.data() + r.left(); ++p)
        if (*p >= 0x80) return false;
    return true;
}

std::string text(const Reader& r) { return std::string(reinterpret_cast<const char*>(r.data()), r.left()); }

// The key; false when it is not a plain, valid one (each field at most once, a step or a bucket of width > 0).
bool read_key(Reader r, WindowIn& w, const UnitLimits& limits) {
    bool seen[6] = {};
    int which = 0;  // 3: step, 4: bucket
    while (!r.done()) {
        uint32_t field, type;
        r.tag(field, type);
        if (field > 5 || seen[field]) return false;
        seen[field] = true;
        if (field == 1 || field == 2) {
            if (type != LEN) return false;
            Reader s = r.sub();
            if (field == 1) {
                if (!job_name(s)) return false;
                w.job = text(s);
            } else {
                if (!ascii(s)) return false;
                w.metric = text(s);
            }
        } else if (field == 3 || field == 5) {
            if (type != VARINT) return false;
            uint64_t v = r.varint();
            if (field == 3) {
                w.index = v;
                w.width_ms = 0;  // step and bucket are a oneof: the last on the wire wins, as in protobuf
                which = 3;
            } else {
                w.attempt = v;
            }
        } else {  // 4: TimeBucket{start_ms int64 = 1, width_ms uint32 = 2}
            if (type != LEN) return false;
            Reader b = r.sub();
            bool got[3] = {};
            uint64_t start = 0, width = 0;
            while (!b.done()) {
                uint32_t f, t;
                b.tag(f, t);
                if (f > 2 || got[f] || t != VARINT) return false;
                got[f] = true;
                (f == 1 ? start : width) = b.varint();
            }
            if (static_cast<int64_t>(start) < 0 || width == 0 || width > 0xffffffffu) return false;
            w.index = start;
            w.width_ms = static_cast<uint32_t>(width);
            which = 4;
        }
    }
    // A job of "" is left out on the wire (proto3): no field 1 at all, which the name check must still refuse.
    return seen[1] && which != 0 && w.index <= limits.max_index && w.attempt < limits.max_attempt;
}

// One WindowSummary{key = 1, summary = 2, expected = 3, late = 4}: `w.fast` set when it is plain and valid. A late
// delta (late = 1) is read as any window, its flag kept in `w.late` for the caller to carry (a tier must not send a
// window's late parts up as its first, nor the root store them as its first row); a `late` other than 0 or 1 is
// left to the per-window path (protobuf reads it as true).
void read_window(Reader r, WindowIn& w, const UnitLimits& limits, SourcesMemo& memo) {
    bool seen[5] = {};
    const uint8_t* summary = nullptr;
    size_t summary_n = 0;
    while (!r.done()) {
        uint32_t field, type;
        r.tag(field, type);
        if (field > 4 || seen[field]) return;
        seen[field] = true;
        if (field == 1 || field == 2) {
            if (type != LEN) return;
            Reader s = r.sub();
            if (field == 1) {
                if (!read_key(s, w, limits)) return;
            } else {
                summary = s.data();
                summary_n = s.left();
            }
        } else {
            if (type != VARINT) return;
            uint64_t v = r.varint();
            if (field == 3) {
                if (v > 0xffffffffu || v > limits.max_world) return;
                w.expected = static_cast<uint32_t>(v);
            } else {
                if (v > 1) return;  // not a bool as upb writes one: the per-window path
                w.late = v == 1;
            }
        }
    }
    if (!seen[1] || !seen[2]) return;
    try {
        decode_into(w.core, summary, summary_n, &memo);  // w.core: a fresh Core (read_unit's emplace_back)
    } catch (const std::exception&) {
        w.core = Core();  // none of a part-read summary is kept
        return;  // refused by the caller's own decode, in the same words
    }
    if (w.core.k != limits.k || w.core.sketch.max_centroids != limits.max_centroids) return;
    w.fast = true;
}

// How many windows (field-3 records) the message holds, to size the unit's vector once (each WindowIn holds a Core);
// 0 when it is not well formed (read_unit then throws as it reads).
size_t count_windows(const uint8_t* data, size_t n) {
    size_t windows = 0;
    try {
        Reader r(data, n);
        while (!r.done()) {
            uint32_t field, type;
            r.tag(field, type);
            if (field == 3 && type == LEN) ++windows;
            r.skip_field(field, type);
        }
    } catch (const WireError&) {
        return 0;
    }
    return windows;
}

}  // namespace

UnitIn read_unit(const uint8_t* data, size_t n, const UnitLimits& limits) {
    UnitIn out;
    out.windows.reserve(count_windows(data, n));
    std::vector<size_t> firsts;  // per group, its first window
    SourcesMemo memo;  // the sources parsed last: a child's windows repeat them (into `data`, which outlives it)
    Reader r(data, n);
    while (!r.done()) {
        const uint8_t* start = r.data();
        uint32_t field, type;
        r.tag(field, type);
        if (field != 3 || type != LEN) {
            r.skip_field(field, type);
            out.rest.append(reinterpret_cast<const char*>(start), static_cast<size_t>(r.data() - start));
            continue;
        }
        Reader body = r.sub();
        out.windows.emplace_back();
        WindowIn& w = out.windows.back();
        try {
            read_window(body, w, limits, memo);
        } catch (const WireError&) {
            w.fast = false;
        }
        if (!w.fast) continue;
        size_t i = 0;
        for (; i < firsts.size() && i < GROUPS_COMPARED; ++i)
            if (out.windows[firsts[i]].core.sources.same(w.core.sources) ||
                roaring::api::roaring_bitmap_equals(out.windows[firsts[i]].core.sources.get(), w.core.sources.get()))
                break;
        if (i == firsts.size() || i == GROUPS_COMPARED) {
            i = firsts.size();
            firsts.push_back(out.windows.size() - 1);
            out.group_sources.push_back(serialize_bitmap(w.core.sources.get()));
        }
        w.group = i;
    }
    return out;
}

}  // namespace treemetry

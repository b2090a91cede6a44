// The Python module telemetry.summary._native: the summary's hot path (decode, merge, encode) over `Core`.
// telemetry/summary/summary.py is its one caller; see there for what each entry point stands for.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <tuple>
#include <unordered_map>

#include "core.hpp"
#include "ingest.hpp"
#include "table.hpp"
#include "unit.hpp"

namespace py = pybind11;
using namespace treemetry;
using roaring::api::roaring_bitmap_get_cardinality;

namespace {

// Bytes-like input without a copy: bytes directly, anything else through the buffer protocol.
template <class F>
auto with_buffer(py::handle obj, F&& fn) {
    if (PyBytes_Check(obj.ptr())) {
        return fn(reinterpret_cast<const uint8_t*>(PyBytes_AS_STRING(obj.ptr())),
                  static_cast<size_t>(PyBytes_GET_SIZE(obj.ptr())));
    }
    py::buffer_info info = py::reinterpret_borrow<py::buffer>(obj).request();
    if (info.ndim > 1 && info.strides.back() != info.itemsize) throw py::value_error("expected contiguous bytes");
    return fn(static_cast<const uint8_t*>(info.ptr), static_cast<size_t>(info.size * info.itemsize));
}

py::bytes as_bytes(const std::string& s) { return py::bytes(s.data(), s.size()); }

py::list pair_list(const Pairs& pairs) {
    py::list out(pairs.size());
    for (size_t i = 0; i < pairs.size(); ++i) out[i] = py::make_tuple(pairs[i].first, pairs[i].second);
    return out;
}

std::vector<Core*> cores_of(const py::sequence& seq) {
    std::vector<Core*> out;
    out.reserve(seq.size());
    for (py::handle item : seq) out.push_back(item.cast<Core*>());
    return out;
}

// Summary.merge_all's checks and merge: a new Core, or the overlapping sources (a list) when they intersect.
py::object merge_all_py(const py::sequence& seq) {
    std::vector<Core*> cores = cores_of(seq);
    if (cores.empty()) throw py::value_error("merge_all needs at least one summary");
    for (size_t i = 1; i < cores.size(); ++i) check_compatible(*cores[0], *cores[i]);
    std::vector<const roaring::api::roaring_bitmap_t*> bitmaps;
    uint64_t total = 0;
    for (Core* c : cores) {
        bitmaps.push_back(c->sources.get());
        total += roaring_bitmap_get_cardinality(c->sources.get());
    }
    Bitmap union_ = union_of(bitmaps);
    if (roaring_bitmap_get_cardinality(union_.get()) != total) return py::cast(overlapping(cores));
    if (cores.size() == 1) return py::cast(clone(*cores[0]));
    return py::cast(merge_all(cores, union_.get()));
}

// Summary.merge_over_time: several windows of one metric over time, merged in the order given; a source may
// recur (once per window), so there is no overlap check.
Core merge_over_time_py(const py::sequence& seq) {
    std::vector<Core*> cores = cores_of(seq);
    if (cores.empty()) throw py::value_error("merge_over_time needs at least one summary");
    for (size_t i = 1; i < cores.size(); ++i) check_compatible(*cores[0], *cores[i]);
    std::vector<const roaring::api::roaring_bitmap_t*> bitmaps;
    for (Core* c : cores) bitmaps.push_back(c->sources.get());
    Bitmap union_ = union_of(bitmaps);
    Core merged;
    merged.k = cores[0]->k;
    merged.sketch.max_centroids = cores[0]->sketch.max_centroids;
    absorb(merged, cores, union_.get());
    return merged;
}

// Summary.merge: fold `other` into self in place; the overlapping sources (a list) instead when they intersect.
py::object absorb_py(Core& self, Core& other) {
    check_compatible(self, other);
    std::vector<Core*> pair{&self, &other};
    if (roaring::api::roaring_bitmap_intersect(self.sources.get(), other.sources.get()))
        return py::cast(overlapping(pair));
    absorb(self, {&other});
    return py::none();
}

// A bitmap this process serialized (pyroaring): parsed safely, not validated again.
Bitmap trusted_bitmap(py::handle obj) {
    if (obj.is_none()) return empty_bitmap();
    return with_buffer(obj, [](const uint8_t* p, size_t n) {
        if (n == 0) return empty_bitmap();
        Bitmap out(roaring::api::roaring_bitmap_portable_deserialize_safe(reinterpret_cast<const char*>(p), n));
        if (!out) throw std::invalid_argument("not a portable roaring bitmap");
        return out;
    });
}

uint64_t as_u64(PyObject* obj) {
    if (PyLong_CheckExact(obj)) {
        uint64_t v = PyLong_AsUnsignedLongLong(obj);
        if (v == static_cast<uint64_t>(-1) && PyErr_Occurred()) throw py::error_already_set();
        return v;
    }
    py::object index = py::reinterpret_steal<py::object>(PyNumber_Index(obj));  // numpy integers
    if (!index) throw py::error_already_set();
    return as_u64(index.ptr());
}

uint32_t as_u32(PyObject* obj) {
    uint64_t v = as_u64(obj);
    if (v > UINT32_MAX) throw py::value_error("a source or bound above 2**32 - 1");
    return static_cast<uint32_t>(v);
}

int64_t as_i64(PyObject* obj) {
    long long v = PyLong_AsLongLong(obj);
    if (v == -1 && PyErr_Occurred()) throw py::error_already_set();
    return v;
}

double as_double(PyObject* obj) {
    double v = PyFloat_AsDouble(obj);
    if (v == -1.0 && PyErr_Occurred()) throw py::error_already_set();
    return v;
}

Pairs as_pairs(PyObject* list) {
    if (!PyList_Check(list)) throw py::type_error("top/bottom must be lists of (value, source)");
    Py_ssize_t n = PyList_GET_SIZE(list);
    Pairs out;
    out.reserve(static_cast<size_t>(n));
    for (Py_ssize_t i = 0; i < n; ++i) {
        PyObject* item = PyList_GET_ITEM(list, i);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2) throw py::type_error("expected (value, source)");
        out.emplace_back(as_double(PyTuple_GET_ITEM(item, 0)), as_u32(PyTuple_GET_ITEM(item, 1)));
    }
    return out;
}

// The fast-call entry points' common end: what `make` returns (a Core, a Unit), or its exception as a Python error
// (ValueError, unless Python's own error is already set).
template <class F>
PyObject* result_or_error(F&& make) {
    try {
        return py::cast(make()).release().ptr();
    } catch (py::error_already_set& e) {
        e.restore();
    } catch (const std::exception& e) {
        PyErr_SetString(PyExc_ValueError, e.what());
    }
    return nullptr;
}

// build(k, count, sum, mean, m2, min, argmin, max, argmax, top, bottom, sources, nonfinite_count,
// nonfinite_sources, first_ns, last_ns, max_centroids, digest): a core from the fields of a summary built by
// ingest (trusted: this process made them). Called once per ingested summary that is encoded or merged (every
// agent's window), so it is a plain fast-call function: no per-argument dispatch.
PyObject* build(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
    if (nargs != 18) {
        PyErr_SetString(PyExc_TypeError, "build takes 18 arguments");
        return nullptr;
    }
    return result_or_error([&] {
        Core c;
        c.k = as_u32(args[0]);
        c.count = as_u64(args[1]);
        c.sum = as_double(args[2]);
        c.mean = as_double(args[3]);
        c.m2 = as_double(args[4]);
        c.min = as_double(args[5]);
        c.argmin = as_u32(args[6]);
        c.max = as_double(args[7]);
        c.argmax = as_u32(args[8]);
        c.top = as_pairs(args[9]);
        c.bottom = as_pairs(args[10]);
        c.sources = SharedBitmap(trusted_bitmap(args[11]));
        c.nonfinite_count = as_u64(args[12]);
        if (args[13] != Py_None) c.nonfinite_sources = SharedBitmap(trusted_bitmap(args[13]));
        c.first_ns = as_i64(args[14]);
        c.last_ns = as_i64(args[15]);
        c.sketch.max_centroids = as_u32(args[16]);
        if (args[17] != Py_None) {
            c.sketch.digest =
                with_buffer(args[17], [](const uint8_t* p, size_t n) { return digest_from_fastdigest(p, n); });
            c.sketch.has_digest = !c.sketch.digest.empty();
        }
        return c;
    });
}

// decode(data): the hot entry point of every collector (one call per child summary), a fast-call function too.
PyObject* decode_py(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
    if (nargs != 1) {
        PyErr_SetString(PyExc_TypeError, "decode takes 1 argument");
        return nullptr;
    }
    return result_or_error([&] { return with_buffer(args[0], [](const uint8_t* p, size_t n) { return decode(p, n); }); });
}

// A contiguous buffer of 8-byte items (float64 or int64, as Summary.from_arrays hands them over): pointer, count.
template <class T>
const T* items_of(const py::buffer_info& info, const char* what) {
    if (info.itemsize != 8 || info.ndim != 1 || (info.size > 1 && info.strides[0] != 8))
        throw py::value_error(std::string(what) + " must be a contiguous 1-d array of 8-byte items");
    return static_cast<const T*>(info.ptr);
}

// from_arrays(values, sources, first_ns, last_ns, k, max_centroids): the agent's ingest, one call per metric and
// window (values float64, sources int64, both contiguous and of one length).
PyObject* from_arrays_py(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "from_arrays takes 6 arguments");
        return nullptr;
    }
    return result_or_error([&] {
        py::buffer_info values = py::reinterpret_borrow<py::buffer>(args[0]).request();
        py::buffer_info sources = py::reinterpret_borrow<py::buffer>(args[1]).request();
        if (values.format != "d") throw py::value_error("values must be float64");
        if (values.size != sources.size)
            throw py::value_error(std::to_string(values.size) + " values but " + std::to_string(sources.size) +
                                  " sources");
        const double* v = items_of<double>(values, "values");
        const int64_t* s = items_of<int64_t>(sources, "sources");
        int64_t first_ns = as_i64(args[2]), last_ns = as_i64(args[3]);
        uint32_t k = as_u32(args[4]), max_centroids = as_u32(args[5]);
        Core c;
        {
            py::gil_scoped_release unlocked;  // the buffers stay alive: their owners are this call's arguments
            c = from_arrays(v, s, static_cast<size_t>(values.size), first_ns, last_ns, k, max_centroids);
        }
        return c;
    });
}

// A unit read by read_unit, for Python: its windows' cores stay here until a table takes them (Windows.offer_unit)
// or the per-window path asks for them as summaries (`windows`).
struct Unit {
    UnitIn in;
    bool all_fast = true;
    bool consumed = false;

    UnitIn& take() {
        if (consumed) throw std::invalid_argument("this unit's windows were taken already");
        consumed = true;
        return in;
    }
};

// read_unit(data, k, max_centroids, max_index, max_attempt, max_world): a tier's whole unit (SummaryBatch bytes) in
// one call, as a Unit.
PyObject* read_unit_py(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "read_unit takes 6 arguments");
        return nullptr;
    }
    return result_or_error([&] {
        UnitLimits limits;
        limits.k = as_u32(args[1]);
        limits.max_centroids = as_u32(args[2]);
        limits.max_index = as_u64(args[3]);
        limits.max_attempt = as_u64(args[4]);
        limits.max_world = as_u64(args[5]);
        Unit unit;
        unit.in = with_buffer(args[0], [&](const uint8_t* p, size_t n) { return read_unit(p, n, limits); });
        for (const WindowIn& w : unit.in.windows) unit.all_fast = unit.all_fast && w.fast;
        return unit;
    });
}

// Unit.windows(wrapper): per WindowSummary, None (the caller's per-window path judges it) or (job, attempt, metric,
// index, width_ms, expected, summary, group, late), the summary an instance of `wrapper` (a class with a `_core` slot:
// Summary) holding the core. Takes the cores.
py::list unit_windows(Unit& unit, py::handle wrapper_type) {
    if (!PyType_Check(wrapper_type.ptr())) throw py::type_error("the wrapper must be a class");
    auto* wrapper = reinterpret_cast<PyTypeObject*>(wrapper_type.ptr());
    UnitIn& in = unit.take();
    py::str core_slot("_core");
    py::list windows(in.windows.size());
    py::object job;  // one str per run of windows of one job (a unit's windows are mostly one job's)
    std::string job_text;
    for (size_t i = 0; i < in.windows.size(); ++i) {
        WindowIn& w = in.windows[i];
        if (!w.fast) {
            windows[i] = py::none();
            continue;
        }
        if (!job || w.job != job_text) {
            job = py::str(w.job);
            job_text = w.job;
        }
        py::object summary = py::reinterpret_steal<py::object>(wrapper->tp_alloc(wrapper, 0));
        if (!summary) throw py::error_already_set();
        if (PyObject_SetAttr(summary.ptr(), core_slot.ptr(), py::cast(std::move(w.core)).ptr()) < 0)
            throw py::error_already_set();
        windows[i] = py::make_tuple(job, w.attempt, py::str(w.metric), w.index, w.width_ms, w.expected, summary,
                                    w.group, w.late);
    }
    return windows;
}

// Unit.combos(): the distinct (job, attempt, group) of its windows, in order of first appearance.
py::list unit_combos(const Unit& unit) {
    py::list out;
    std::vector<std::tuple<const std::string*, uint64_t, size_t>> seen;
    for (const WindowIn& w : unit.in.windows) {
        if (!w.fast) continue;
        bool known = false;
        for (auto& [job, attempt, group] : seen)
            if (group == w.group && attempt == w.attempt && *job == w.job) {
                known = true;
                break;
            }
        if (known) continue;
        seen.emplace_back(&w.job, w.attempt, w.group);
        out.append(py::make_tuple(w.job, w.attempt, w.group));
    }
    return out;
}

// Unit.metric_names(job, attempt): those names as one bytes, each a 4-byte little-endian length then the name: equal
// bytes, equal names in the same order (a collector skips its budget's check of names it admitted last time).
py::bytes unit_metric_names(const Unit& unit, const std::string& job, uint64_t attempt) {
    std::string out;
    for (const WindowIn& w : unit.in.windows)
        if (w.fast && w.attempt == attempt && w.job == job) {
            uint32_t n = static_cast<uint32_t>(w.metric.size());
            for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
            out += w.metric;
        }
    return py::bytes(out);
}

// Unit.metrics(job, attempt): the metric names of that job's windows, in order.
py::list unit_metrics(const Unit& unit, const std::string& job, uint64_t attempt) {
    py::list out;
    for (const WindowIn& w : unit.in.windows)
        if (w.fast && w.attempt == attempt && w.job == job) out.append(py::str(w.metric));
    return out;
}

const WindowIn& unit_window(const Unit& unit, size_t pos) {
    if (pos >= unit.in.windows.size() || !unit.in.windows[pos].fast) throw py::index_error("no such window read");
    return unit.in.windows[pos];
}

// A set of sources parsed once and asked about many windows (Windows.complete).
struct Sources {
    Bitmap bitmap;
};

py::tuple refused_tuple(const Refused& r) {
    return py::make_tuple(r.pos, r.slot, static_cast<int>(r.verdict), r.overlap, r.sources);
}

py::bytes sources_of(const Windows& table, uint32_t slot) {
    return as_bytes(serialize_bitmap(table.at(slot).sources.get()));
}

PyMethodDef FAST[] = {
    {"from_arrays", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(from_arrays_py)), METH_FASTCALL,
     "A core from values[i] of sources[i] (the agent's ingest); ValueError on a source outside [0, 2**32)."},
    {"build", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(build)), METH_FASTCALL,
     "A core from an ingested summary's fields (trusted)."},
    {"decode", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(decode_py)), METH_FASTCALL,
     "Parse and check untrusted bytes; ValueError('malformed summary: ...') on anything wrong."},
    {"read_unit", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(read_unit_py)), METH_FASTCALL,
     "A unit's windows, each decoded and checked, or None where the caller's own checks must judge it."},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

PYBIND11_MODULE(_native, m) {
    m.doc() = "The summary's hot path in C++: decode (checked), merge, encode. See telemetry/summary/summary.py.";

    py::class_<Core>(m, "Core")
        .def_readonly("k", &Core::k)
        .def_readonly("count", &Core::count)
        .def_property_readonly("max_centroids", [](const Core& c) { return c.sketch.max_centroids; })
        .def("encode", [](Core& c) { return as_bytes(encode(c)); }, "The canonical wire bytes.")
        .def("clone", [](Core& c) { return clone(c); })
        .def("absorb", &absorb_py)
        .def("add_many", [](Core& c, py::buffer values, uint32_t source, int64_t time_ns) {
            py::buffer_info info = values.request();
            if (info.format != "d") throw py::value_error("values must be float64");
            const double* v = items_of<double>(info, "values");
            return add_many(c, v, static_cast<size_t>(info.size), source, time_ns);
        }, "Summary.add_many on the core; False (the core unchanged) where the Python ingest must do it.")
        .def("sources_bytes", [](Core& c) { return as_bytes(serialize_bitmap(c.sources.get())); })
        .def("digest_bytes", [](Core& c) -> py::object {
            std::string raw = fastdigest_bytes(c);
            if (raw.empty()) return py::none();
            return as_bytes(raw);
        }, "The sketch in fastdigest's binary layout (TDigest.from_bytes), or None when empty.")
        .def("fields", [](Core& c) {
            return py::make_tuple(
                c.k, c.count, c.sum, c.mean, c.m2, c.min, c.argmin, c.max, c.argmax, pair_list(c.top),
                pair_list(c.bottom), as_bytes(serialize_bitmap(c.sources.get())), c.nonfinite_count,
                as_bytes(serialize_bitmap(c.nonfinite_sources.get())), c.first_ns, c.last_ns);
        }, "(k, count, sum, mean, m2, min, argmin, max, argmax, top, bottom, sources, nonfinite_count, "
           "nonfinite_sources, first_ns, last_ns); bitmaps as portable bytes.");

    py::class_<Unit>(m, "Unit")
        .def_readonly("all_fast", &Unit::all_fast)
        .def("__len__", [](const Unit& u) { return u.in.windows.size(); })
        .def("groups", [](const Unit& u) {
            py::list out;
            for (const std::string& g : u.in.group_sources) out.append(as_bytes(g));
            return out;
        })
        .def("rest", [](const Unit& u) { return as_bytes(u.in.rest); })
        .def("windows", &unit_windows)
        .def("combos", &unit_combos)
        .def("metrics", &unit_metrics)
        .def("metric_names", &unit_metric_names)
        .def("key", [](const Unit& u, size_t pos) {
            const WindowIn& w = unit_window(u, pos);
            return py::make_tuple(w.job, w.attempt, w.metric, w.index, w.width_ms, w.expected);
        }, "(job, attempt, metric, index, width_ms, expected) of a window read fast.");

    py::class_<Batch>(m, "Batch")
        .def("__len__", [](const Batch& b) { return b.entries.size(); })
        .def("merged", &merge_batch, "The merge of the entries' cores (a new Core).")
        .def("refs", [](const Batch& b) {
            py::list out(b.entries.size());
            for (size_t i = 0; i < b.entries.size(); ++i) out[i] = py::make_tuple(b.entries[i].origin, b.entries[i].index);
            return out;
        }, "(origin, index) of each entry.")
        .def("entries", [](Batch& b) {
            py::list out(b.entries.size());
            for (size_t i = 0; i < b.entries.size(); ++i)
                out[i] = py::make_tuple(b.entries[i].origin, b.entries[i].index, clone(b.entries[i].core));
            return out;
        }, "(origin, index, a copy of the core) of each entry.");

    m.def("origin_counts", [](const py::sequence& batches) {
        // A rack's batches of one flush hold their children's entries in one order (each unit was offered to every
        // window), so each entry is looked for first where the entry before it was found, plus one: 19,200 entries a
        // step found without a hash lookup each (the map was 8 % of the outbox loop's perf samples; docs/scale.md).
        std::unordered_map<uint64_t, size_t> at;  // origin -> its place in `order` (every origin of `order`)
        std::vector<std::pair<uint64_t, uint64_t>> order;  // (origin, entries), in order of first appearance
        for (py::handle item : batches) {
            const Batch& b = item.cast<const Batch&>();
            size_t next = 0;
            for (const Entry& e : b.entries) {
                if (next < order.size() && order[next].first == e.origin) {
                    ++order[next++].second;
                    continue;
                }
                auto [it, fresh] = at.try_emplace(e.origin, order.size());
                if (fresh) order.emplace_back(e.origin, 0);
                ++order[it->second].second;
                next = it->second + 1;
            }
        }
        py::list out(order.size());
        for (size_t i = 0; i < order.size(); ++i) out[i] = py::make_tuple(order[i].first, order[i].second);
        return out;
    }, "(origin, entries) over the batches, each origin once, in order of first appearance.");

    py::class_<Sources>(m, "Sources")
        .def(py::init([](py::handle data) { return Sources{trusted_bitmap(data)}; }),
             "A bitmap this process serialized (pyroaring), held natively to be asked about many windows.");

    py::class_<Windows>(m, "Windows")
        .def(py::init<>())
        .def("__len__", &Windows::size)
        .def("offer_unit", [](Windows& t, Unit& u, uint64_t origin) {
            if (!u.all_fast) throw py::value_error("offer_unit takes only units whose every window was read fast");
            UnitOffer o = t.offer_unit(u.take(), origin);
            py::list refused(o.refused.size());
            for (size_t i = 0; i < o.refused.size(); ++i) refused[i] = refused_tuple(o.refused[i]);
            return py::make_tuple(o.created, o.became_pending, refused, o.accepted, o.added_sources, o.late);
        }, "(created [(pos, slot)], became_pending [slot], refused [(pos, slot, verdict, overlap, part's sources)], "
           "accepted, added_sources, late [slot of each late delta accepted])")
        .def("slot", [](Windows& t, const std::string& job, uint64_t attempt, const std::string& metric,
                        uint64_t index, uint32_t width_ms, uint32_t expected) {
            return t.slot_of(job, attempt, metric, index, width_ms, expected);
        }, "(slot, created) of a window; its expected world raised to at least `expected`.")
        .def("expect", &Windows::expect)
        .def("offer_core", [](Windows& t, uint32_t slot, const Core& core, uint64_t origin, uint32_t index) {
            bool became = false;
            uint64_t added = 0;
            Refused r = t.offer_core(slot, core, origin, index, became, added);
            return py::make_tuple(static_cast<int>(r.verdict), r.overlap, became, added);
        }, "(verdict, overlap, became_pending, added_sources); the core is copied.")
        .def("expected", [](const Windows& t, uint32_t slot) { return t.at(slot).expected; })
        .def("pending", [](const Windows& t, uint32_t slot) { return t.at(slot).pending.size(); })
        .def("pending_origins", [](const Windows& t, uint32_t slot) {
            std::vector<uint64_t> out;
            for (const Entry& e : t.at(slot).pending)
                if (std::find(out.begin(), out.end(), e.origin) == out.end()) out.push_back(e.origin);
            return out;
        }, "The units the window's pending parts came in (their ids), each once.")
        .def("pending_max", [](const Windows& t, uint32_t slot) {
            double best = -INFINITY;
            for (const Entry& e : t.at(slot).pending)
                if (e.core.count > 0 && e.core.max > best) best = e.core.max;
            return best;
        }, "The largest value among the window's pending parts (-inf when they hold none): whether a fleet second "
           "holds a fault that passes it on at once (collectors/common/fleet.py URGENT_METRICS).")
        .def("version", [](const Windows& t, uint32_t slot) { return t.at(slot).version; })
        .def("charged", [](const Windows& t, uint32_t slot) { return t.at(slot).charged; })
        .def("sources", &sources_of, "The window's sources, portable roaring bytes.")
        .def("count", [](const Windows& t, uint32_t slot) {
            return roaring_bitmap_get_cardinality(t.at(slot).sources.get());
        }, "How many sources the window holds.")
        .def("remove_sources", [](Windows& t, uint32_t slot, py::handle data) {
            Bitmap sources = trusted_bitmap(data);
            t.remove_sources(slot, sources.get());
        })
        .def("watch", &Windows::watch, "Ask the window's completeness with its job's (complete) until unwatched.")
        .def("watched_jobs", &Windows::watched_jobs, "(job, attempt) of each job with a watched window pending.")
        .def("complete", [](const Windows& t, const std::string& job, uint64_t attempt, const Sources* covered,
                            int64_t world, bool buckets) {
            return t.complete(job, attempt, covered == nullptr ? nullptr : covered->bitmap.get(), world, buckets);
        }, py::arg("job"), py::arg("attempt"), py::arg("covered").none(true), py::arg("world") = -1,
           py::arg("buckets") = true,
           "The watched windows of (job, attempt) with pending parts that hold every source of `covered` (None: any "
           "source): a collector's completeness, one call per job and flush. With world >= 0, step windows are "
           "judged by the root's rule instead (every rank of their expected world, else of `world`); with buckets "
           "False, no other window is complete.")
        .def("missing", [](const Windows& t, const Unit& u) {
            if (!u.all_fast || u.consumed) throw py::value_error("missing takes only a unit read fast, not offered");
            return t.missing(u.in);
        }, "The positions of the unit's windows the table does not hold.")
        .def("restore", &Windows::restore,
             "A taken batch pending again, ahead of what came since (the batch is empty after); whether the window "
             "held nothing pending before.")
        .def("add_sources", [](Windows& t, uint32_t slot, py::handle data) {
            Bitmap sources = trusted_bitmap(data);
            t.add_sources(slot, sources.get());
        })
        .def("take", &Windows::take)
        .def("remove", &Windows::remove);

    m.def("merge_all", &merge_all_py);
    m.def("merge_over_time", &merge_over_time_py);
    m.def("pairs_json", [](const std::vector<std::pair<double, int64_t>>& pairs) -> py::object {
        std::string out;
        if (!pairs_json(pairs, out)) return py::none();
        return py::str(out);
    }, "json.dumps of (value, source) pairs (the root's `top` column: float values, integer sources below 2**63); "
       "None where a value is not finite.");
    if (PyModule_AddFunctions(m.ptr(), FAST) < 0) throw py::error_already_set();
}

// Ingest at the agent: a summary's core built straight from its ranks' raw values (Summary.from_arrays), so a
// node's window never holds per-value or per-field Python objects before it is merged or encoded.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core.hpp"

namespace treemetry {

// values[i] from sources[i] (sources checked to lie in [0, 2**32); throws std::invalid_argument otherwise); NaN,
// +-Inf and finite values beyond +-MAX_MAGNITUDE are counted with their sources and kept out of everything else. first_ns/last_ns are stamped only when
// there is a value, as the Python ingest did.
Core from_arrays(const double* values, const int64_t* sources, size_t n, int64_t first_ns, int64_t last_ns,
                 uint32_t k, uint32_t max_centroids);

// Summary.add_many(values, source, time_ns) on a core: values from one source folded in as the Python ingest did
// (numpy's sums, the moments combined by Chan et al. with math.fsum's sum, numpy's argmin/argmax, the k largest and
// smallest kept, fastdigest's batch_update for the sketch). Returns false, changing nothing, in the one case whose
// result hangs on the order numpy's partition leaves ties in: fewer top/bottom slots than values, and both -0.0
// and 0.0 among them (the caller then takes the Python path).
bool add_many(Core& c, const double* values, size_t n, uint32_t source, int64_t time_ns);

}  // namespace treemetry

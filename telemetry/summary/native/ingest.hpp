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

}  // namespace treemetry

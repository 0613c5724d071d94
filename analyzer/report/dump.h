// `stallscope dump`: one trace as it was read, before any analysis (calls,
// device ops, NCCL arguments, NVTX events and ranges, stacks, diagnostics),
// as text for a person or as JSON for tools and tests.
#pragma once

#include <string>
#include <string_view>

#include "analyzer/model/timeline.h"

namespace stallscope::analyzer {

// One line per record in time order (rank first, diagnostics last).
std::string RenderDumpText(const Timeline& t);

// Schema stallscope.dump/1 (docs/analyzer.md, "The command"): the file's
// process, its threads, and every call (with its Python frames), device op,
// NCCL call, NVTX event and range, and diagnostic.
std::string RenderDumpJson(const Timeline& t);

// `s` with control bytes, backslashes and double quotes escaped (\xNN, \\,
// \"): names from a trace cannot move the terminal's cursor or forge a line
// or a field of the dump. UTF-8 passes through.
std::string Printable(std::string_view s);

}  // namespace stallscope::analyzer

//===- moec-runner.cpp - Run and check a bundle entry on the GPU ----------===//
//
// Part of moec. The runtime-only tool for the GPU machine, which has no MLIR:
// loads a bundle, makes random inputs for one entry, runs it with the CUDA
// driver, checks every intermediate and output against the float64
// reference, then times it with CUDA events.
//
//   moec-runner BUNDLE [--entry NAME] [--target sm_90a] [--sym T=8192 ...]
//               [--routing uniform|one-expert|half-experts] [--seed N]
//               [--iters N] [--warmup N] [--no-end-to-end] [--list]
//
// Exit status: 0 when the check passes, 1 when it fails or anything goes
// wrong (with a message), 2 for bad command-line arguments.
//
//===----------------------------------------------------------------------===//

#include "moec/Check/Check.h"
#include "moec/Runtime/Bundle.h"
#include "moec/Runtime/CudaLauncher.h"
#include "moec/Runtime/Executor.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>
#include <string>
#include <vector>

using namespace moec;

namespace {

const char *const kUsage =
    "usage: moec-runner BUNDLE [--entry NAME] [--target TARGET] "
    "[--sym NAME=VALUE ...]\n"
    "                   [--routing uniform|one-expert|half-experts] "
    "[--seed N]\n"
    "                   [--iters N] [--warmup N] [--no-end-to-end] [--list]\n"
    "\n"
    "Runs one entry of a .moecb bundle on the GPU with random inputs, checks\n"
    "it against the float64 reference and times it.\n"
    "  --entry NAME      the entry (default: the only one for the target)\n"
    "  --target TARGET   default sm_90a\n"
    "  --sym NAME=VALUE  a symbol (dynamic dimension), e.g. --sym T=8192;\n"
    "                    repeat or separate with commas\n"
    "  --routing MODE    how ids / router logits are drawn (default uniform)\n"
    "  --seed N          input seed (default 1)\n"
    "  --iters N         timed runs (default 20; 0 skips timing)\n"
    "  --warmup N        untimed runs before them (default 3)\n"
    "  --no-end-to-end   skip the end-to-end reference (large shapes)\n"
    "  --list            list the bundle's entries and exit\n";

struct Options {
  std::string bundle;
  std::string entry;
  std::string target = "sm_90a";
  std::map<std::string, int64_t> symbols;
  check::InputOptions inputs;
  int iters = 20;
  int warmup = 3;
  bool endToEnd = true;
  bool list = false;
};

bool parseInt(const std::string &text, int64_t &value) {
  if (text.empty())
    return false;
  errno = 0;
  char *end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (*end != '\0' || errno == ERANGE)
    return false;
  value = v;
  return true;
}

bool parseSymbols(const std::string &text, Options &options) {
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    std::string item = text.substr(
        start, comma == std::string::npos ? std::string::npos : comma - start);
    size_t eq = item.find('=');
    int64_t value;
    if (eq == std::string::npos || eq == 0 ||
        !parseInt(item.substr(eq + 1), value) || value < 0) {
      std::fprintf(stderr,
                   "moec-runner: bad --sym '%s': expected NAME=VALUE with a "
                   "non-negative integer\n",
                   item.c_str());
      return false;
    }
    options.symbols[item.substr(0, eq)] = value;
    if (comma == std::string::npos)
      break;
    start = comma + 1;
  }
  return true;
}

/// Parses argv; prints the problem and returns false on error.
bool parseArgs(int argc, char **argv, Options &options) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&](std::string &out) {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "moec-runner: %s needs a value\n", arg.c_str());
        return false;
      }
      out = argv[++i];
      return true;
    };
    auto count = [&](int &out, int64_t min) {
      std::string text;
      int64_t v;
      if (!value(text))
        return false;
      if (!parseInt(text, v) || v < min || v > 1000000) {
        std::fprintf(stderr, "moec-runner: bad %s '%s'\n", arg.c_str(),
                     text.c_str());
        return false;
      }
      out = static_cast<int>(v);
      return true;
    };
    std::string text;
    if (arg == "-h" || arg == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (arg == "--entry") {
      if (!value(options.entry))
        return false;
    } else if (arg == "--target") {
      if (!value(options.target))
        return false;
    } else if (arg == "--sym") {
      if (!value(text) || !parseSymbols(text, options))
        return false;
    } else if (arg == "--routing") {
      if (!value(text))
        return false;
      if (!check::parseRouting(text, options.inputs.routing)) {
        std::fprintf(stderr,
                     "moec-runner: unknown routing '%s' (uniform, "
                     "one-expert, half-experts)\n",
                     text.c_str());
        return false;
      }
    } else if (arg == "--seed") {
      int64_t seed;
      if (!value(text))
        return false;
      if (!parseInt(text, seed)) {
        std::fprintf(stderr, "moec-runner: bad --seed '%s'\n", text.c_str());
        return false;
      }
      options.inputs.seed = static_cast<uint64_t>(seed);
    } else if (arg == "--iters") {
      if (!count(options.iters, 0))
        return false;
    } else if (arg == "--warmup") {
      if (!count(options.warmup, 0))
        return false;
    } else if (arg == "--no-end-to-end") {
      options.endToEnd = false;
    } else if (arg == "--list") {
      options.list = true;
    } else if (!arg.empty() && arg[0] == '-') {
      std::fprintf(stderr, "moec-runner: unknown option '%s'\n", arg.c_str());
      return false;
    } else if (options.bundle.empty()) {
      options.bundle = arg;
    } else {
      std::fprintf(stderr, "moec-runner: more than one bundle given ('%s')\n",
                   arg.c_str());
      return false;
    }
  }
  if (options.bundle.empty()) {
    std::fputs("moec-runner: no bundle given\n", stderr);
    return false;
  }
  return true;
}

void listEntries(const rt::Bundle &bundle) {
  std::printf("bundle version %u, produced by %s, %zu entries\n",
              bundle.version, bundle.producer.c_str(), bundle.entries.size());
  for (const rt::Entry &e : bundle.entries) {
    std::printf("  %-28s %-8s %-11s %zu buffers, %zu launches, symbols:",
                e.name.c_str(), e.target.c_str(), rt::binaryKindName(e.binaryKind),
                e.buffers.size(), e.steps.size());
    for (const rt::SymbolDesc &s : e.symbols)
      std::printf(" %s", s.name.c_str());
    std::printf("\n");
  }
}

int fail(const std::string &what, const rt::Status &status) {
  std::fprintf(stderr, "moec-runner: %s: %s\n", what.c_str(),
               status.toString().c_str());
  return 1;
}

/// The entry named by the options, or the only one for the target.
const rt::Entry *selectEntry(const rt::Bundle &bundle, const Options &options) {
  if (!options.entry.empty()) {
    if (const rt::Entry *e = bundle.find(options.entry, options.target))
      return e;
    std::fprintf(stderr, "moec-runner: no entry '%s' for target %s in %s\n",
                 options.entry.c_str(), options.target.c_str(),
                 options.bundle.c_str());
    return nullptr;
  }
  std::vector<const rt::Entry *> matches;
  for (const rt::Entry &e : bundle.entries)
    if (e.target == options.target)
      matches.push_back(&e);
  if (matches.size() == 1)
    return matches[0];
  if (matches.empty()) {
    std::fprintf(stderr, "moec-runner: %s has no entry for target %s\n",
                 options.bundle.c_str(), options.target.c_str());
  } else {
    std::string names;
    for (const rt::Entry *e : matches)
      names += " " + e->name;
    std::fprintf(stderr,
                 "moec-runner: %s has %zu entries for %s; pick one with "
                 "--entry:%s\n",
                 options.bundle.c_str(), matches.size(),
                 options.target.c_str(), names.c_str());
  }
  return nullptr;
}

/// Symbol values in the entry's order, from --sym by name.
bool bindSymbols(const rt::Entry &entry, const Options &options,
                 std::vector<int64_t> &symbols) {
  std::string missing, unknown;
  for (const rt::SymbolDesc &s : entry.symbols) {
    auto it = options.symbols.find(s.name);
    if (it == options.symbols.end())
      missing += " " + s.name;
    else
      symbols.push_back(it->second);
  }
  for (const auto &[name, value] : options.symbols) {
    bool known = false;
    for (const rt::SymbolDesc &s : entry.symbols)
      known |= s.name == name;
    if (!known)
      unknown += " " + name;
  }
  if (!missing.empty())
    std::fprintf(stderr,
                 "moec-runner: entry '%s' needs a value for symbol(s)%s "
                 "(--sym NAME=VALUE)\n",
                 entry.name.c_str(), missing.c_str());
  if (!unknown.empty())
    std::fprintf(stderr, "moec-runner: entry '%s' has no symbol(s)%s\n",
                 entry.name.c_str(), unknown.c_str());
  return missing.empty() && unknown.empty();
}

/// Device copies of every buffer; freed on destruction.
struct DeviceBuffers {
  std::vector<void *> pointers;
  std::vector<rt::ArrayRef> arrays;

  ~DeviceBuffers() {
    for (void *p : pointers)
      if (p)
        (void)rt::cudaFree(p);
  }

  rt::Status upload(const std::vector<check::HostArray> &host) {
    for (const check::HostArray &h : host) {
      void *p = nullptr;
      // Never a zero-byte allocation: an empty buffer still gets an address.
      if (rt::Status s = rt::cudaAlloc(std::max<size_t>(h.bytes.size(), 1), &p);
          !s)
        return s;
      pointers.push_back(p);
      arrays.push_back({p, h.elem, h.shape});
      if (!h.bytes.empty())
        if (rt::Status s =
                rt::cudaCopyToDevice(p, h.bytes.data(), h.bytes.size());
            !s)
          return s;
    }
    return rt::Status::ok();
  }

  rt::Status download(std::vector<check::HostArray> &host) const {
    for (size_t i = 0; i < host.size(); ++i)
      if (!host[i].bytes.empty())
        if (rt::Status s = rt::cudaCopyToHost(
                host[i].bytes.data(), pointers[i], host[i].bytes.size());
            !s)
          return s;
    return rt::Status::ok();
  }
};

int run(const Options &options) {
  rt::Bundle bundle;
  if (rt::Status s = rt::readBundleFile(options.bundle, bundle); !s)
    return fail("cannot load " + options.bundle, s);
  if (options.list) {
    listEntries(bundle);
    return 0;
  }
  const rt::Entry *entry = selectEntry(bundle, options);
  if (!entry)
    return 1;
  std::vector<int64_t> symbols;
  if (!bindSymbols(*entry, options, symbols))
    return 1;

  std::printf("entry %s (%s, %zu launches), routing %s, seed %llu, symbols:",
              entry->name.c_str(), entry->target.c_str(), entry->steps.size(),
              check::routingName(options.inputs.routing),
              static_cast<unsigned long long>(options.inputs.seed));
  for (size_t i = 0; i < symbols.size(); ++i)
    std::printf(" %s=%lld", entry->symbols[i].name.c_str(),
                static_cast<long long>(symbols[i]));
  std::printf("\n");

  std::vector<check::HostArray> inputs, host;
  if (rt::Status s = check::makeInputs(*entry, symbols, options.inputs, inputs);
      !s)
    return fail("cannot make inputs", s);
  if (rt::Status s = check::allocateBuffers(*entry, symbols, inputs, host); !s)
    return fail("cannot allocate buffers", s);
  inputs.clear();

  if (rt::Status s = rt::cudaInit(); !s)
    return fail("CUDA", s);
  rt::CudaDeviceInfo info;
  if (rt::Status s = rt::cudaDeviceInfo(info); s)
    std::printf("device %s (sm_%d%d, %d SMs)\n", info.name.c_str(), info.major,
                info.minor, info.multiprocessors);

  DeviceBuffers device;
  if (rt::Status s = device.upload(host); !s)
    return fail("cannot copy the buffers to the device", s);
  rt::CudaLauncher launcher;
  auto runOnce = [&]() {
    return rt::runEntryWithAllBuffers(*entry, device.arrays, launcher);
  };
  if (rt::Status s = runOnce(); !s)
    return fail("run", s);
  if (rt::Status s = launcher.synchronize(); !s)
    return fail("run", s);
  if (rt::Status s = device.download(host); !s)
    return fail("cannot copy the buffers back", s);

  check::CheckOptions checkOptions;
  checkOptions.endToEnd = options.endToEnd;
  check::CheckReport report;
  if (rt::Status s =
          check::checkEntry(*entry, symbols, host, checkOptions, report);
      !s)
    return fail("check", s);
  std::fputs(report.summary().c_str(), stdout);
  host.clear();

  if (options.iters > 0) {
    std::vector<double> ms;
    if (rt::Status s = rt::cudaTimeLaunches(launcher.stream(), runOnce,
                                            options.warmup, options.iters, ms);
        !s)
      return fail("timing", s);
    std::vector<double> sorted = ms;
    std::sort(sorted.begin(), sorted.end());
    double median = sorted.size() % 2
                        ? sorted[sorted.size() / 2]
                        : 0.5 * (sorted[sorted.size() / 2 - 1] +
                                 sorted[sorted.size() / 2]);
    std::printf("time: median %.4f ms, min %.4f ms (%d runs after %d "
                "warm-up)\n",
                median, sorted.front(), options.iters, options.warmup);
  }
  return report.pass ? 0 : 1;
}

} // namespace

int main(int argc, char **argv) {
  Options options;
  if (!parseArgs(argc, argv, options)) {
    std::fputs("run 'moec-runner --help' for the options\n", stderr);
    return 2;
  }
  try {
    return run(options);
  } catch (const std::exception &e) {
    // The runtime and the checker report through Status; this is for the
    // unexpected (std::bad_alloc on a huge --sym, ...).
    std::fprintf(stderr, "moec-runner: %s\n", e.what());
    return 1;
  }
}

// Calibration: the machine-dependent numbers of the cost model (LinkModel), per transport, and
// where a process gets them.
//
// Why a file: the numbers (step latency, bandwidth, reduction rate, ...) are properties of the
// machine, not of braid's code. bench/calibrate measures them and writes them to a calibration
// file; every process reads that file once, when it creates its first communicator, and the
// selectors of the communicators whose rank 0 it is price algorithms with it. Without a file the
// built-in table (calibration.cc, the one place in the code that holds measured numbers) is
// used, so behaviour without a file is what it always was.
//
// Where the file is: $BRAID_CALIBRATION if set ("none": the built-in table, no file read), else
// $XDG_CACHE_HOME/braid/calibration, else $HOME/.cache/braid/calibration. A missing file at the
// default location is the normal case (INFO); a missing file that BRAID_CALIBRATION names, an
// unreadable or a malformed one is a WARN naming the file (and line) and falls back to the
// built-in table: a bad calibration never fails a communicator.
//
// The format (docs/ALGORITHMS.md, "Calibration file"): `key = value` lines, `#` comments,
// `version = 1`, then `<transport>.<key> = <number>` for any transport ("shm", "tcp", ...) and the
// keys of TransportCalibration. A key the file leaves out keeps its built-in value; a transport
// with no built-in entry starts from tcp's. Unknown keys are skipped with a WARN (a newer
// calibrate may write keys this build does not know); everything else that does not parse
// rejects the whole file, so a model is never half from a broken file.
//
// Every rank of a communicator must price with the same numbers, or ranks pick different
// algorithms for the same call and wait on messages that never come. Hosts of one job may hold
// different files (or none), so a communicator does not use each process's own: rank 0 publishes
// its calibration (Serialize) during creation and every other rank adopts it (Deserialize;
// core/calibration_agreement.h), and a split's children inherit their parent's. The INFO lines
// name the file and a checksum of its numbers.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "algorithms/algorithm.h"
#include "core/base/status.h"

namespace braid::algorithms {

// One transport's numbers: the keys of a calibration file, named as there. "Ranks share cores"
// means some host runs more ranks than it has CPUs (they take turns); "core per rank" that every
// rank has a CPU of its own. LinkModel (algorithms/algorithm.h) says what each number prices.
struct TransportCalibration {
  double latency_us = 0;                 // one message step, ranks share cores (alpha)
  double latency_us_core_per_rank = 0;   // one message step, a core per rank
  double message_us = 0;                 // per pipelined chunk message, ranks share cores
  double message_us_core_per_rank = 0;   // per pipelined chunk message, a core per rank
  double bandwidth_gbps = 0;             // per link while every rank sends (1/beta)
  double reduce_gbps = 0;                // CPU reduction of a cache-resident chunk (1/gamma)
  double memory_reduce_gbps = 0;         // CPU reduction once the buffers outgrow the cache
  double cache_bytes = 0;                // last-level cache the ranks of a host share
  double pipeline_us = 0;                // per call of a pipelined algorithm (ring, tree)
  double fan_out_us = 0;                 // per message a rank has in flight at once in a step
  // shm only (algorithms/single_copy_choice.h): from how many bytes a message between processes
  // is copied once, straight out of the sender's buffer (0: never), with a CPU per rank and
  // where ranks share CPUs, and that path's exchange rate.
  double single_copy_bytes = 0;
  double single_copy_bytes_shared_cores = 0;
  double single_copy_gbps = 0;           // 0: not measured, or cross-memory attach refused
};

// The keys of TransportCalibration, in file order, with what the parser accepts.
struct CalibrationKey {
  const char* name;
  double TransportCalibration::*field;
  bool positive;  // must be > 0 (a rate: it divides); otherwise >= 0
  const char* meaning;
};
const std::vector<CalibrationKey>& CalibrationKeys();

// A calibration file's values: transport -> key -> value, only what the file states.
using CalibrationValues = std::map<std::string, std::map<std::string, double>>;

class Calibration {
 public:
  // The built-in table: the numbers measured on the development VMs (calibration.cc says how).
  static Calibration BuiltIn();

  // Parses a calibration file's text; `file` names it in messages ("<file>:<line>: ..."). Errors
  // (InvalidArgument) name the first bad line; unknown keys are skipped and described in
  // `*warnings` (one entry per line, naming file and line) when `warnings` is given.
  static Result<Calibration> Parse(const std::string& text, const std::string& file,
                                   std::vector<std::string>* warnings = nullptr);
  // Reads and parses the file at `path`: SystemError naming the path and the reason (no such
  // file, permission denied, ...) if it cannot be read, else as Parse.
  static Result<Calibration> Load(const std::string& path,
                                  std::vector<std::string>* warnings = nullptr);

  // The numbers of `transport`: its own entry, else tcp's (as a transport without a model of
  // its own has always been priced). nullptr means tcp.
  const TransportCalibration& Of(const char* transport) const;

  // The link model of a job whose slowest transport is `transport`, with shm's numbers for the
  // link inside a host (LinkModel::intra_host_*). `oversubscribed`: some host runs more ranks
  // than it has CPUs; `ranks_per_cpu`: how many on the busiest host (read only when
  // oversubscribed).
  LinkModel Model(const char* transport, bool oversubscribed, double ranks_per_cpu) const;

  // Where the numbers came from, for logs: "built-in (...)" or the file's path.
  const std::string& source() const { return source_; }
  // What the file stated (empty for the built-in table).
  const CalibrationValues& values() const { return values_; }
  // A checksum of every transport's numbers (FNV-1a over their text), so that logs of two
  // ranks show whether they price alike.
  std::string Fingerprint() const;

  // This calibration as one record for another process: where it came from and, for a file, the
  // text that was parsed. Why the text rather than the numbers: whatever the format can state
  // travels, keys added later included, and the receiver parses it by the same rules, so
  // Deserialize(Serialize()) has the same numbers and Fingerprint.
  std::string Serialize() const;
  // The calibration a Serialize record describes; its source is `prefix` followed by the
  // sender's ("rank 0's /shared/braid.cal"). InvalidArgument naming the problem when the record
  // is not one (another record version, cut short) or its text does not parse here.
  static Result<Calibration> Deserialize(const std::string& record, const std::string& prefix);

 private:
  std::string source_;
  // A file's text as parsed (Serialize sends it); from_file_ is false for the built-in table.
  std::string text_;
  bool from_file_ = false;
  CalibrationValues values_;
  std::map<std::string, TransportCalibration> transports_;  // always has "tcp"
};

// The text of a calibration file stating `values` (what bench/calibrate measured), with
// `comment` (one or more lines, '#' added) at its head. Every key of shm and tcp that `values`
// does not state is written commented out with its built-in value, so the file documents the
// whole model while unmeasured keys keep following the built-in table. Parse(Format(v)) states v.
std::string FormatCalibration(const CalibrationValues& values, const std::string& comment);

// Where this process looks for its calibration file (see the head of this file); "" when
// BRAID_CALIBRATION is "none" or no location can be formed (no HOME).
std::string CalibrationPath();

// Reads the calibration as the environment says now, logging where it came from (INFO) or why a
// file was not used (WARN, naming file and line); never fails. Not cached: ProcessCalibration
// is the cached one; tests call this to check each case.
Calibration LoadCalibrationFromEnvironment();

// This process's calibration: LoadCalibrationFromEnvironment's answer at the first call, kept for
// the life of the process. Thread-safe.
const Calibration& ProcessCalibration();

// The model a communicator's selector uses for a job whose slowest transport is `transport`
// (core/communicator.cc, JobLinkModel): calibration.Model(...), where `calibration` is the one
// the communicator's ranks agreed on (rank 0's). Logs the model and its source at INFO.
LinkModel DefaultLinkModel(const Calibration& calibration, const char* transport,
                           bool oversubscribed, double ranks_per_cpu);

}  // namespace braid::algorithms

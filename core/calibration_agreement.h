// Every rank of a communicator prices algorithms with rank 0's calibration.
//
// Why: each rank's selector picks every collective's algorithm from the cost model on its own,
// without a word to the others, so ranks whose models differ can pick different algorithms for
// the same call and wait on messages that never come, or mix two schedules. The model's numbers
// come from a calibration file each process reads for itself (algorithms/calibration.h), and the
// hosts of one job may hold different files, or one none. So during creation rank 0 publishes its
// calibration in the communicator's store view and every other rank adopts it; a split's children
// inherit their parent's (Communicator::Split passes it down), so they agree too, whichever parent
// rank becomes their rank 0.
//
// Order: rank 0 publishes before the peer exchange and the others read after it, so the record is
// in the store by the time they look (rank 0 published its peer record after it), and a rank 0
// that dies after the exchange cannot leave them waiting for it.
#pragma once

#include <memory>

#include "algorithms/calibration.h"
#include "core/base/deadline.h"
#include "core/base/status.h"
#include "rendezvous/store.h"

namespace braid {

// Where rank 0's record lives in the communicator's store view.
inline constexpr const char* kCalibrationKey = "calibration";

// Rank 0 of a communicator of two or more ranks: publishes this process's calibration
// (ProcessCalibration, its Serialize record) under kCalibrationKey. Any other rank: nothing.
// Errors: the store's, naming this rank.
Status PublishCalibration(rendezvous::Store& store, int rank, int size, Deadline deadline);

// After the peer exchange: the calibration every rank of the communicator prices with. Rank 0
// (and a communicator of one rank) gets this process's own; every other rank reads rank 0's
// record and gets the calibration it describes (this process's own when the records are equal),
// logging at INFO when it differs from this process's.
// Errors: the store's, naming this rank; RemoteError naming rank 0 when its record cannot be read
// here (another record version, or a text this build does not parse).
Result<std::shared_ptr<const algorithms::Calibration>> AgreedCalibration(rendezvous::Store& store,
                                                                         int rank, int size,
                                                                         Deadline deadline);

}  // namespace braid

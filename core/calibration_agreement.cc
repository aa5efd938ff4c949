#include "core/calibration_agreement.h"

#include <string>
#include <utility>

#include "core/base/logging.h"

namespace braid {

Status PublishCalibration(rendezvous::Store& store, int rank, int size, Deadline deadline) {
  if (rank != 0 || size <= 1) return Status::Ok();
  const Status published =
      store.Set(kCalibrationKey, algorithms::ProcessCalibration().Serialize(), deadline);
  if (published.ok()) return published;
  return published.WithContext("rank 0: publishing its cost model calibration");
}

Result<std::shared_ptr<const algorithms::Calibration>> AgreedCalibration(rendezvous::Store& store,
                                                                         int rank, int size,
                                                                         Deadline deadline) {
  const algorithms::Calibration& own = algorithms::ProcessCalibration();
  // The process's calibration lives until exit, so a pointer to it needs no owner.
  const std::shared_ptr<const algorithms::Calibration> own_pointer(
      std::shared_ptr<const algorithms::Calibration>(), &own);
  if (rank == 0 || size <= 1) return own_pointer;
  const std::string who = "rank " + std::to_string(rank);
  Result<std::string> record = store.Get(kCalibrationKey, deadline);
  if (!record.ok()) {
    return record.status().WithContext(who + ": reading rank 0's cost model calibration");
  }
  if (record.value() == own.Serialize()) return own_pointer;
  Result<algorithms::Calibration> adopted =
      algorithms::Calibration::Deserialize(record.value(), "rank 0's ");
  if (!adopted.ok()) {
    return Status::RemoteError(who + ": rank 0's cost model calibration cannot be read here: " +
                               adopted.status().message());
  }
  BRAID_LOG(kInfo, rank) << "cost model calibration: " << adopted.value().source()
                         << " (checksum " << adopted.value().Fingerprint()
                         << "), as every rank of this communicator, not this process's "
                         << own.source() << " (checksum " << own.Fingerprint() << ")";
  return std::shared_ptr<const algorithms::Calibration>(
      std::make_shared<algorithms::Calibration>(std::move(adopted).value()));
}

}  // namespace braid

// env:// parsing: torchrun, SLURM and Open MPI variables, precedence, and errors that name the
// variable at fault.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

#include "rendezvous/launch_env.h"
#include "rendezvous/unique_id.h"

namespace braid::rendezvous {
namespace {

void ClearLaunchVariables() {
  for (const char* name :
       {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "SLURM_PROCID",
        "SLURM_NTASKS", "SLURM_LOCALID", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
        "OMPI_COMM_WORLD_LOCAL_RANK", "BRAID_STORE_HOSTED", "BRAID_SECRET"}) {
    unsetenv(name);
  }
}

}  // namespace

TEST_CASE("torchrun variables", "[launch_env]") {
  ClearLaunchVariables();
  setenv("RANK", "3", 1);
  setenv("WORLD_SIZE", "8", 1);
  setenv("LOCAL_RANK", "1", 1);
  setenv("MASTER_ADDR", "10.0.0.7", 1);
  setenv("MASTER_PORT", "29501", 1);
  setenv("BRAID_STORE_HOSTED", "1", 1);
  setenv("BRAID_SECRET", "s3", 1);
  auto env = ReadLaunchEnvironment();
  REQUIRE(env.ok());
  CHECK(env->source == "torchrun");
  CHECK(env->rank == 3);
  CHECK(env->world_size == 8);
  CHECK(env->local_rank == 1);
  CHECK(env->master_addr == "10.0.0.7");
  CHECK(env->master_port == 29501);
  CHECK(env->store_hosted);
  CHECK(env->secret == "s3");

  // Also set SLURM variables: torchrun's take precedence.
  setenv("SLURM_PROCID", "0", 1);
  setenv("SLURM_NTASKS", "2", 1);
  CHECK(ReadLaunchEnvironment()->rank == 3);
}

TEST_CASE("torchrun variables missing or malformed are named", "[launch_env]") {
  ClearLaunchVariables();
  setenv("RANK", "0", 1);
  setenv("WORLD_SIZE", "2", 1);
  auto env = ReadLaunchEnvironment();
  REQUIRE_FALSE(env.ok());
  CHECK(env.status().message().find("MASTER_ADDR") != std::string::npos);

  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", "70000", 1);
  env = ReadLaunchEnvironment();
  REQUIRE_FALSE(env.ok());
  CHECK(env.status().message().find("MASTER_PORT") != std::string::npos);

  setenv("MASTER_PORT", "29500", 1);
  setenv("RANK", "2", 1);
  env = ReadLaunchEnvironment();
  REQUIRE_FALSE(env.ok());
  CHECK(env.status().code() == Code::kInvalidArgument);
  CHECK(env.status().message().find("world size") != std::string::npos);

  setenv("RANK", "x1", 1);
  env = ReadLaunchEnvironment();
  REQUIRE_FALSE(env.ok());
  CHECK(env.status().message().find("RANK='x1'") != std::string::npos);
}

TEST_CASE("SLURM and Open MPI variables", "[launch_env]") {
  ClearLaunchVariables();
  setenv("SLURM_PROCID", "5", 1);
  setenv("SLURM_NTASKS", "6", 1);
  setenv("SLURM_LOCALID", "1", 1);
  setenv("MASTER_ADDR", "node0", 1);
  auto env = ReadLaunchEnvironment();
  REQUIRE(env.ok());
  CHECK(env->source == "SLURM");
  CHECK(env->rank == 5);
  CHECK(env->world_size == 6);
  CHECK(env->local_rank == 1);
  CHECK(env->master_addr == "node0");
  CHECK(env->master_port == 29500);

  ClearLaunchVariables();
  setenv("OMPI_COMM_WORLD_RANK", "1", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
  env = ReadLaunchEnvironment();
  REQUIRE(env.ok());
  CHECK(env->source == "Open MPI");
  CHECK(env->world_size == 4);
  CHECK(env->master_addr == "127.0.0.1");

  ClearLaunchVariables();
  env = ReadLaunchEnvironment();
  REQUIRE_FALSE(env.ok());
  CHECK(env.status().message().find("RANK") != std::string::npos);
}

TEST_CASE("unique id bytes round trip and garbage is refused", "[unique_id]") {
  UniqueIdFields fields;
  fields.host = "fe80::1";
  fields.port = 40123;
  auto token = RandomToken();
  REQUIRE(token.ok());
  fields.token = token.value();
  char bytes[kUniqueIdBytes];
  REQUIRE(EncodeUniqueId(fields, bytes).ok());
  auto decoded = DecodeUniqueId(bytes);
  REQUIRE(decoded.ok());
  CHECK(decoded->host == fields.host);
  CHECK(decoded->port == fields.port);
  CHECK(decoded->token == fields.token);

  char garbage[kUniqueIdBytes] = {0};
  CHECK(DecodeUniqueId(garbage).status().code() == Code::kInvalidArgument);
  bytes[4] = 99;  // another version
  CHECK(DecodeUniqueId(bytes).status().message().find("version") != std::string::npos);

  fields.host = std::string(200, 'h');
  CHECK(EncodeUniqueId(fields, bytes).code() == Code::kInvalidArgument);
  CHECK(RandomToken().value() != RandomToken().value());
}

}  // namespace braid::rendezvous

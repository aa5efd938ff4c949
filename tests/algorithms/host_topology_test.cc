// HostTopology: hosts numbered by their lowest rank, each rank's host and place on it, the
// largest host and whether all are alike, from host keys in any order; the expected values are
// written out by hand for each layout.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "algorithms/host_topology.h"

using braid::algorithms::HostTopology;

TEST_CASE("ranks placed host by host", "[topology]") {
  // braidrun's numbering: node K runs ranks K*N .. K*N+N-1.
  const HostTopology t = HostTopology::FromHostKeys({"a", "a", "a", "a", "b", "b", "b", "b"});
  CHECK(t.ranks() == 8);
  CHECK(t.hosts() == 2);
  CHECK(t.max_ranks_per_host() == 4);
  CHECK(t.uniform());
  CHECK(t.ranks_on(0) == std::vector<int>{0, 1, 2, 3});
  CHECK(t.ranks_on(1) == std::vector<int>{4, 5, 6, 7});
  CHECK(t.host_of(3) == 0);
  CHECK(t.host_of(4) == 1);
  CHECK(t.local_rank(5) == 1);
  CHECK(t.Describe() == "2 hosts x 4 ranks");
}

TEST_CASE("ranks dealt round-robin over hosts", "[topology]") {
  // The key order decides nothing but the numbering: host 0 is rank 0's, host 1 rank 1's.
  const HostTopology t = HostTopology::FromHostKeys({"y", "x", "z", "y", "x", "z"});
  CHECK(t.hosts() == 3);
  CHECK(t.ranks_on(0) == std::vector<int>{0, 3});
  CHECK(t.ranks_on(1) == std::vector<int>{1, 4});
  CHECK(t.ranks_on(2) == std::vector<int>{2, 5});
  CHECK(t.host_of(4) == 1);
  CHECK(t.local_rank(0) == 0);
  CHECK(t.local_rank(3) == 1);
  CHECK(t.local_rank(5) == 1);
  CHECK(t.Describe() == "3 hosts x 2 ranks");
}

TEST_CASE("hosts of different sizes", "[topology]") {
  const HostTopology t = HostTopology::FromHostKeys({"a", "b", "b", "b", "c", "c"});
  CHECK(t.hosts() == 3);
  CHECK_FALSE(t.uniform());
  CHECK(t.max_ranks_per_host() == 3);
  CHECK(t.ranks_on(1) == std::vector<int>{1, 2, 3});
  CHECK(t.local_rank(3) == 2);
  CHECK(t.Describe() == "3 hosts, 1 to 3 ranks each");
  // The smaller host first or last: neither hides the difference.
  CHECK_FALSE(HostTopology::FromHostKeys({"a", "a", "b"}).uniform());
  CHECK_FALSE(HostTopology::FromHostKeys({"a", "b", "b"}).uniform());
}

TEST_CASE("one host, one rank per host, no ranks", "[topology]") {
  const HostTopology one = HostTopology::OneHost(4);
  CHECK(one.hosts() == 1);
  CHECK(one.ranks_on(0) == std::vector<int>{0, 1, 2, 3});
  CHECK(one.local_rank(2) == 2);
  CHECK(one.Describe() == "1 host x 4 ranks");

  const HostTopology spread = HostTopology::FromHostKeys({"a", "b", "c"});
  CHECK(spread.hosts() == 3);
  CHECK(spread.max_ranks_per_host() == 1);
  CHECK(spread.uniform());
  CHECK(spread.local_rank(2) == 0);
  CHECK(spread.Describe() == "3 hosts x 1 rank");

  const HostTopology none = HostTopology::OneHost(0);
  CHECK(none.ranks() == 0);
  CHECK(none.hosts() == 0);
}

// The one Catch2 main shared by every braid test binary (Catch2 v2, Debian's catch2 package).
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>

// `geoccl wanem ...`: the WAN emulator's command line.
//
//   geoccl wanem run SCENARIO [options]   bring up the test bed until Ctrl-C
//   geoccl wanem ctl SOCKET COMMAND...    change links while traffic flows
//   geoccl wanem check SCENARIO           validate and describe a scenario
//   geoccl wanem sweep                    remove namespaces of dead runs
#pragma once

namespace geoccl::testbed {

// argv[0] is "wanem". Returns the process exit status; never calls exit().
int wanem_main(int argc, char** argv);

}  // namespace geoccl::testbed

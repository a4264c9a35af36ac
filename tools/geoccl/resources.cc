#include "resources.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

namespace geoccl::tools {
namespace {

// The number after `key` on a /proc/self/status line ("VmRSS:     1234 kB" -> 1234).
bool status_value(const std::string& line, const char* key, double* v) {
  if (line.rfind(key, 0) != 0) return false;
  std::istringstream in(line.substr(std::strlen(key)));
  in >> *v;
  return true;
}

}  // namespace

Resources read_resources() {
  Resources r;
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    double v = 0;
    if (status_value(line, "VmRSS:", &v)) r.rss_mb = v / 1024;  // kB
    else if (status_value(line, "VmHWM:", &v)) r.peak_rss_mb = v / 1024;
    else if (status_value(line, "RssShmem:", &v)) r.shmem_mb = v / 1024;
    else if (status_value(line, "Threads:", &v)) r.threads = static_cast<int>(v);
  }
  if (DIR* d = opendir("/proc/self/fd")) {
    while (const dirent* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      char target[256];
      const std::string path = std::string("/proc/self/fd/") + e->d_name;
      const ssize_t n = readlink(path.c_str(), target, sizeof(target) - 1);
      if (n <= 0) continue;
      target[n] = '\0';
      if (std::strncmp(target, "socket:", 7) == 0) ++r.sockets;
    }
    closedir(d);
  }
  // Mappings of memfd segments, one per inode ("ADDR PERMS OFFSET DEV INODE /memfd:NAME (deleted)").
  std::ifstream maps("/proc/self/maps");
  std::set<std::string> inodes;
  for (std::string line; std::getline(maps, line);) {
    if (line.find(" /memfd:") == std::string::npos) continue;
    std::istringstream in(line);
    std::string addr, perms, offset, dev, inode;
    in >> addr >> perms >> offset >> dev >> inode;
    inodes.insert(dev + ":" + inode);
  }
  r.segments = static_cast<int>(inodes.size());
  rusage u{};
  if (getrusage(RUSAGE_SELF, &u) == 0)
    r.cpu_s = static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
              static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
  return r;
}

}  // namespace geoccl::tools

// A file destination: chunks land in `<path>.geoccl-part` (mapped, sized first), the verified
// ones are recorded in `<path>.geoccl-state` after every window, and commit() renames the part
// file to `<path>` and removes the state. A later run for the same object (same size, hash and
// chunk size) re-hashes the chunks the state lists and resumes from those that still match.
#pragma once

#include <string>

#include "blob/destination.h"
#include "blob/mapped_file.h"
#include "blob/resume_state.h"

namespace geoccl::blob {

class FileDestination final : public Destination {
 public:
  // `resume` false: ignore and overwrite any earlier state.
  FileDestination(std::string path, bool resume);
  std::vector<uint8_t> open(const ObjectHeader& h) override;
  std::span<uint8_t> bytes() override { return file_.bytes(); }
  void persist(const std::vector<uint8_t>& verified, const std::vector<uint64_t>& hashes) override;
  void commit() override;

  static std::string part_path(const std::string& path) { return path + ".geoccl-part"; }
  static std::string state_path(const std::string& path) { return path + ".geoccl-state"; }

 private:
  std::string path_;
  bool resume_;
  ResumeState state_;
  MappedFile file_;
};

}  // namespace geoccl::blob

// ordo/io/dir_entry.hpp - one entry of a directory listing
// (ordo::io::Reactor::list_dir).
#pragma once

#include <cstdint>
#include <string>

namespace ordo::io {

/// What a directory entry is (from readdir's d_type; where the file system
/// leaves that unknown, from an lstat of the entry).
enum class FileType : std::uint8_t {
  unknown,  ///< the lstat failed too (the entry went away meanwhile)
  regular,
  directory,
  symlink,  ///< not followed
  block_device,
  character_device,
  fifo,
  socket,
};

/// One entry of a directory ("." and ".." are never listed).
struct DirEntry {
  std::string name;  ///< the entry's name in its directory (no path)
  FileType type = FileType::unknown;
  std::uint64_t inode = 0;
  friend bool operator==(const DirEntry&, const DirEntry&) = default;
};

}  // namespace ordo::io

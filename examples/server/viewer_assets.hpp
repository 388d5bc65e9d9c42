// The slice viewer's static files (examples/server/viewer/), embedded into
// the server at build time by viewer/embed.cmake (a generated source).
// Immutable data: safe to read from any thread.
#pragma once

#include <span>
#include <string_view>

namespace zarrcoro::server {

struct ViewerAsset {
  std::string_view name;          // the file name, e.g. "viewer.js"
  std::string_view content_type;  // from the extension, with charset
  std::string_view body;          // the file's bytes
  std::string_view etag;          // a strong entity tag (quoted) of the bytes
};

// Every embedded file, in the order the build listed them.
std::span<const ViewerAsset> viewer_assets();

// The file called `name`, or null (only embedded names exist: no paths).
inline const ViewerAsset* find_viewer_asset(std::string_view name) {
  for (const auto& a : viewer_assets())
    if (a.name == name) return &a;
  return nullptr;
}

}  // namespace zarrcoro::server

#include "http/dashboard.h"

#include <fstream>
#include <sstream>

namespace braid::http {

namespace {

std::string ContentType(std::string_view name) {
  auto ends = [&](std::string_view ext) {
    return name.size() >= ext.size() && name.substr(name.size() - ext.size()) == ext;
  };
  if (ends(".html")) return "text/html; charset=utf-8";
  if (ends(".js")) return "text/javascript; charset=utf-8";
  if (ends(".css")) return "text/css; charset=utf-8";
  if (ends(".svg")) return "image/svg+xml";
  return "application/octet-stream";
}

Response FileResponse(std::string_view name, const std::string& dir) {
  Response r;
  r.content_type = ContentType(name);
  if (dir.empty()) {
    for (const DashboardFile& f : BuiltInDashboardFiles())
      if (f.name == name) r.body.assign(f.bytes);
  } else {
    const std::string path = dir + "/" + std::string(name);
    std::ifstream in(path, std::ios::binary);
    if (!in) return JsonError(404, "the dashboard file " + path + " cannot be read");
    std::ostringstream text;
    text << in.rdbuf();
    r.body = text.str();
  }
  // The page loads only its own files and talks only to this server.
  r.headers.emplace_back("Cache-Control", "no-cache");
  r.headers.emplace_back("X-Content-Type-Options", "nosniff");
  r.headers.emplace_back("Content-Security-Policy",
                         "default-src 'self'; img-src 'self' data:; style-src 'self' "
                         "'unsafe-inline'; frame-ancestors 'none'");
  return r;
}

}  // namespace

std::vector<std::string> DashboardPaths() {
  std::vector<std::string> paths = {"/"};
  for (const DashboardFile& f : BuiltInDashboardFiles())
    paths.push_back("/dashboard/" + std::string(f.name));
  return paths;
}

void AddDashboardRoutes(Router* router, const std::string& dir) {
  router->Add("GET", "/",
              [dir](const Request&, const Params&) { return FileResponse("index.html", dir); });
  for (const DashboardFile& f : BuiltInDashboardFiles()) {
    const std::string name(f.name);
    router->Add("GET", "/dashboard/" + name,
                [dir, name](const Request&, const Params&) { return FileResponse(name, dir); });
  }
}

}  // namespace braid::http

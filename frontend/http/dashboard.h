// The dashboard: a page with no build step (frontend/http/dashboard/: HTML,
// JS, CSS) built into the binary and served by braid serve at "/", which
// draws what the API says about runs, engines and clients (docs/dashboard.md).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "http/http_types.h"

namespace braid::http {

struct DashboardFile {
  std::string_view name;  // "index.html", "app.js", "style.css"
  std::string_view bytes;
};

// The files as built in (generated from frontend/http/dashboard/).
const std::vector<DashboardFile>& BuiltInDashboardFiles();

// The paths the page is served at: "/" and "/dashboard/NAME" per file. They
// need no API key (the page holds no data; its API calls carry the key).
std::vector<std::string> DashboardPaths();

// GET "/" (index.html) and GET "/dashboard/NAME" for the files built in; with
// `dir` not empty, the files of those names are read from `dir` on each
// request instead (braid serve --dashboard-dir: a changed page without a
// rebuild). Only those names are served; nothing else under `dir` is.
void AddDashboardRoutes(Router* router, const std::string& dir);

}  // namespace braid::http

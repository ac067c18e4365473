#include "generator/tuning_file.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace attngen {

namespace {

const char* json_type(const nlohmann::json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::object:
      return "OBJECT";
    case nlohmann::json::value_t::array:
      return "ARRAY";
    case nlohmann::json::value_t::string:
      return "STRING";
    case nlohmann::json::value_t::boolean:
      return "BOOLEAN";
    case nlohmann::json::value_t::null:
      return "NULL";
    default:
      return "NUMBER";
  }
}

}  // namespace

bool read_tuning_file(const std::string& path, const std::string& target,
                      std::vector<TuningEntry>* entries, std::string* error) {
  const std::string where = "tuning file " + path;
  const auto fail = [&](const std::string& m) {
    *error = where + ": " + m;
    return false;
  };
  std::ifstream in(path);
  if (!in) return fail("cannot be read");
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return fail("not valid JSON");
  if (!j.is_object()) return fail(std::string("not a JSON object but ") + json_type(j));
  if (!j.contains("format") || j["format"] != "attngen-tuning-1") {
    return fail("\"format\" must be \"attngen-tuning-1\" (schedules/tuned/README.md)");
  }
  const std::string file_target =
      j.contains("target") && j["target"].is_string() ? j["target"].get<std::string>() : "";
  if (file_target != target) {
    return fail("\"target\" is \"" + file_target + "\", expected \"" + target +
                "\" (the file name says which target it tunes)");
  }
  if (!j.contains("entries") || !j["entries"].is_object()) {
    return fail("\"entries\" must be an object of shape classes");
  }
  entries->clear();
  for (const auto& [cls, entry] : j["entries"].items()) {
    const std::string what = "entry \"" + cls + "\"";
    KernelVariant v;
    std::string why;
    if (!variant_of_class(cls, &v, &why)) return fail(what + ": " + why);
    if (tuning_class(v).empty()) return fail(what + ": " + op_name(v.op) + " takes no tunables");
    if (!entry.is_object() || !entry.contains("tunables") || !entry["tunables"].is_object()) {
      return fail(what + ": needs \"tunables\", an object of generator params");
    }
    TuningEntry e;
    e.cls = cls;
    for (const auto& [name, value] : entry["tunables"].items()) {
      if (!value.is_number_integer() || value.get<long long>() < 0 ||
          value.get<long long>() > (1 << 30)) {
        return fail(what + ": tunable \"" + name + "\" must be an integer >= 0, not " +
                    (value.is_string() ? value.get<std::string>() : value.dump()) + " (" +
                    json_type(value) + ")");
      }
      e.tunables.push_back({name, value.get<int>()});
    }
    std::vector<Tunable> merged;
    if (!merge_tunables(v, e.tunables, &merged, &why)) return fail(what + ": " + why);
    entries->push_back(e);
  }
  return true;
}

}  // namespace attngen

#include "generator/modifier.h"

#include <map>
#include <stdexcept>

namespace attngen {

namespace {

std::map<std::string, Modifier>& registry() {
  static std::map<std::string, Modifier> modifiers;
  return modifiers;
}

}  // namespace

bool register_modifier(const Modifier& modifier) {
  const ModifierLayout& l = modifier.layout;
  const std::string name = l.name;
  if (!valid_modifier_name(l.name)) throw std::logic_error("attngen: bad modifier name " + name);
  if (l.score != static_cast<bool>(modifier.score) || l.mask != static_cast<bool>(modifier.mask) ||
      (!l.score && !l.mask) || l.tensors < 0 || l.tensors > kMaxModifierTensors || l.scalars < 0 ||
      l.scalars > kMaxModifierScalars) {
    throw std::logic_error("attngen: modifier " + name + "'s layout does not match its functions");
  }
  if (!registry().emplace(name, modifier).second) {
    throw std::logic_error("attngen: modifier " + name + " registered twice");
  }
  return true;
}

const Modifier* find_modifier(const std::string& name) {
  const auto it = registry().find(name);
  return it == registry().end() ? nullptr : &it->second;
}

std::string modifier_names() {
  std::string names;
  for (const auto& [name, _] : registry()) names += (names.empty() ? "" : ", ") + name;
  return names;
}

}  // namespace attngen

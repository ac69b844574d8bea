// Fixture: the lesson's shared header. It registers nothing.
#pragma once
namespace lesson01 {
struct Shape { long n; };
}

// ordo/detail/asio_config.hpp - what standalone Asio needs to offer
// asio::awaitable with clang; included by ordo's Asio headers before any
// Asio header.
//
// Asio before 1.28 enables co_await under clang only when
// <experimental/coroutine> exists, which libstdc++ lacks, although clang 14+
// with libstdc++'s <coroutine> supports C++20 coroutines fully. The
// ordo::asio CMake target and ordo-asio.pc define ASIO_HAS_CO_AWAIT=1; this
// header does the same for other builds when it comes before <asio.hpp>.
#pragma once

#if defined(__clang__) && !defined(ASIO_HAS_CO_AWAIT) && !defined(ASIO_DISABLE_CO_AWAIT) && \
    defined(__cpp_impl_coroutine) && __has_include(<coroutine>)
#if defined(ASIO_VERSION) && ASIO_VERSION < 102800
#error "ordo/asio.hpp with clang: <asio.hpp> was included first and left asio::awaitable out. \
Define ASIO_HAS_CO_AWAIT=1 (the ordo::asio CMake target and pkg-config's ordo-asio do), include \
<ordo/asio.hpp> before any Asio header, or define ASIO_DISABLE_CO_AWAIT to go without asio::awaitable."
#elif !defined(ASIO_VERSION)
#define ASIO_HAS_CO_AWAIT 1
#endif
#endif

# Install rules and the Debian package (docs/deploy.md "One machine").
#
#   cmake --install build --prefix DIR    bin/switchboard, share/switchboard/{lua,policies}:
#                                         a tree that can be moved anywhere (the binary finds
#                                         ../share/switchboard/lua beside itself, src/install/)
#   cd build && cpack -G DEB              the same under /usr, plus the system component:
#                                         /etc/switchboard/policies (the operator's overlays:
#                                         empty but for a README), the environment files'
#                                         templates (the postinst makes /etc/switchboard/*.env
#                                         from them), the systemd units, the copyright and
#                                         changelog, the maintainer scripts that make the
#                                         `switchboard` user and the shared SANDBOX_TOKEN
#
# One place for what an operator edits: /etc/switchboard (bot.env, sandboxd.env, policies/).
# The shipped policies are /usr/share/switchboard/policies, replaced by every upgrade; the
# services read /etc/switchboard/policies as an overlay over them (docs/policies.md).
#
# The system component holds absolute paths, so it is EXCLUDE_FROM_ALL: a plain
# `cmake --install` into a prefix never writes to /etc.

# Installing and packaging take the tree as built: they never rebuild it (the build stamp is
# regenerated at every build, so a `cpack` in the test suite would relink the binary other
# tests are running). Build first: cmake --build build.
set(CMAKE_SKIP_INSTALL_ALL_DEPENDENCY ON)

# The layout the binary looks for (lua_dir.h): fixed, not GNUInstallDirs' DATADIR, because the
# C side finds it by this relative path.
set(SB_SHARE_DIR share/switchboard)
# switchboard-walls (the per-instance walls' helper, docs/isolation.md) lives next to the binary,
# where shell/instance.lua looks for it.
install(TARGETS switchboard switchboard-walls RUNTIME DESTINATION bin COMPONENT runtime)
install(DIRECTORY ${CMAKE_SOURCE_DIR}/lua/switchboard DESTINATION ${SB_SHARE_DIR}/lua
        COMPONENT runtime FILES_MATCHING PATTERN "*.lua")
install(DIRECTORY ${CMAKE_SOURCE_DIR}/policies/ DESTINATION ${SB_SHARE_DIR}/policies
        COMPONENT runtime FILES_MATCHING PATTERN "*.lua")
install(FILES ${CMAKE_SOURCE_DIR}/docs/deploy.md ${CMAKE_SOURCE_DIR}/docs/isolation.md
              ${CMAKE_SOURCE_DIR}/docs/slack.md ${CMAKE_SOURCE_DIR}/docs/github.md
              ${CMAKE_SOURCE_DIR}/docs/agent.md ${CMAKE_SOURCE_DIR}/docs/policies.md
              ${CMAKE_SOURCE_DIR}/docs/operations.md
        DESTINATION share/doc/switchboard COMPONENT runtime)

# ---- the system component (the Debian package only) ---------------------------------------
set(SB_DEB_DIR ${CMAKE_SOURCE_DIR}/deploy/debian)
# The operator's overlay directory: a README, no policy (the shipped set is under /usr).
install(FILES ${SB_DEB_DIR}/policies-README DESTINATION /etc/switchboard/policies RENAME README
        COMPONENT system EXCLUDE_FROM_ALL)
# Templates of the secrets' files: the postinst copies each to /etc/switchboard (0600, root's)
# when absent, so an upgrade never rewrites what the operator put there.
install(FILES ${SB_DEB_DIR}/bot.env ${SB_DEB_DIR}/sandboxd.env DESTINATION ${SB_SHARE_DIR}/env
        COMPONENT system EXCLUDE_FROM_ALL)
# copyright names the license (Apache-2.0, LICENSE at the repository's root) and points at
# Debian's /usr/share/common-licenses/Apache-2.0 rather than shipping a second copy.
install(FILES ${SB_DEB_DIR}/copyright DESTINATION share/doc/switchboard
        COMPONENT system EXCLUDE_FROM_ALL)
# changelog.gz: written by cmake/cpack_config.cmake when cpack runs (the exact version's entry
# on top of deploy/debian/changelog), in that run's own directory, which it names in cpack's
# environment (two cpack runs from one build directory at once each install their own).
install(CODE [[
  if(NOT DEFINED ENV{SB_CPACK_CHANGELOG})
    message(FATAL_ERROR "the system component is the Debian package's: cpack -G DEB writes its changelog.gz")
  endif()
  file(INSTALL DESTINATION "${CMAKE_INSTALL_PREFIX}/share/doc/switchboard" TYPE FILE
       FILES "$ENV{SB_CPACK_CHANGELOG}")
]] COMPONENT system EXCLUDE_FROM_ALL)
install(FILES ${CMAKE_SOURCE_DIR}/deploy/systemd/switchboard-bot.service
              ${CMAKE_SOURCE_DIR}/deploy/systemd/switchboard-bot@.service
              ${CMAKE_SOURCE_DIR}/deploy/systemd/switchboard-sandboxd.service
        DESTINATION /lib/systemd/system COMPONENT system EXCLUDE_FROM_ALL)
# switchboard-bot.service's hand-over between its two bot instances (docs/deploy.md "Restarts
# without a deaf window")
install(PROGRAMS ${CMAKE_SOURCE_DIR}/deploy/systemd/switchboard-bot-handoff
        DESTINATION lib/switchboard COMPONENT system EXCLUDE_FROM_ALL)

# ---- CPack: one .deb with both components ---------------------------------------------------
set(CPACK_PACKAGE_NAME switchboard)
# Every build its own version, 0.1.0+git<commit time, UTC>.<short commit>, set when cpack runs
# (cmake/cpack_config.cmake), so `apt-get install ./switchboard_….deb` upgrades.
set(CPACK_PACKAGE_VERSION 0.1.0)
set(SB_BASE_VERSION 0.1.0)
set(CPACK_PROJECT_CONFIG_FILE ${CMAKE_BINARY_DIR}/deb/cpack_config.cmake)
configure_file(${CMAKE_SOURCE_DIR}/cmake/cpack_config.cmake.in ${CMAKE_BINARY_DIR}/deb/cpack_config.cmake @ONLY)
set(CPACK_PACKAGE_CONTACT "OpenSwitchboard maintainers <switchboard@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "coding agents from Slack: a C engine, a Lua program, reloadable policies")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_COMPONENTS_ALL runtime system)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_GROUPING ALL_COMPONENTS_IN_ONE)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION net)
# The shared libraries' packages come from dpkg-shlibdeps (libc6, libcurl4, liblua5.4-0,
# libssl3, libuv1, lua-cjson); the rest is what the program runs: bash -c for every command,
# coreutils' timeout, procps' /bin/kill (the units' ExecReload), adduser for the postinst,
# bubblewrap for the walls sandboxd and the resident refuse to start without (docs/isolation.md).
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "adduser, bash, coreutils, procps, bubblewrap, passt, e2fsprogs, libwebsockets-evlib-uv")
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "git, ca-certificates")
# conffiles: the one file the package puts under /etc (the environment files are the
# postinst's, made once; the policies there are the operator's own).
file(WRITE ${CMAKE_BINARY_DIR}/deb/conffiles "/etc/switchboard/policies/README\n")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA ${SB_DEB_DIR}/preinst ${SB_DEB_DIR}/postinst
    ${SB_DEB_DIR}/postrm ${CMAKE_BINARY_DIR}/deb/conffiles)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)

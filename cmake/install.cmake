# Install rules and the Debian package (docs/deploy.md "One machine").
#
#   cmake --install build --prefix DIR    bin/switchboard, share/switchboard/{lua,policies}:
#                                         a tree that can be moved anywhere (the binary finds
#                                         ../share/switchboard/lua beside itself, src/install/)
#   cd build && cpack -G DEB              the same under /usr, plus the system component:
#                                         /etc/switchboard (operator policies, two 0600
#                                         environment files), the systemd units, the
#                                         maintainer scripts that make the `switchboard` user
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
install(FILES ${CMAKE_SOURCE_DIR}/docs/deploy.md DESTINATION share/doc/switchboard COMPONENT runtime)

# ---- the system component (the Debian package only) ---------------------------------------
set(SB_DEB_DIR ${CMAKE_SOURCE_DIR}/deploy/debian)
install(DIRECTORY ${CMAKE_SOURCE_DIR}/policies/ DESTINATION /etc/switchboard/policies
        COMPONENT system EXCLUDE_FROM_ALL FILES_MATCHING PATTERN "*.lua")
# Secrets: read by systemd (as root) for the one unit that needs them; nobody else reads them.
install(FILES ${SB_DEB_DIR}/bot.env ${SB_DEB_DIR}/sandboxd.env DESTINATION /etc/switchboard
        PERMISSIONS OWNER_READ OWNER_WRITE COMPONENT system EXCLUDE_FROM_ALL)
install(FILES ${CMAKE_SOURCE_DIR}/deploy/systemd/switchboard-bot.service
              ${CMAKE_SOURCE_DIR}/deploy/systemd/switchboard-sandboxd.service
        DESTINATION /lib/systemd/system COMPONENT system EXCLUDE_FROM_ALL)

# ---- CPack: one .deb with both components ---------------------------------------------------
set(CPACK_PACKAGE_NAME switchboard)
set(CPACK_PACKAGE_VERSION 0.1.0)
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
# coreutils' timeout, procps' /bin/kill (the units' ExecReload), adduser for the postinst.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "adduser, bash, coreutils, procps")
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "git, ca-certificates, bubblewrap, passt")
# conffiles: every file under /etc, listed from the same glob the install rule uses, so dpkg
# keeps an operator's edits across upgrades.
file(GLOB SB_POLICY_FILES RELATIVE ${CMAKE_SOURCE_DIR}/policies CONFIGURE_DEPENDS
     ${CMAKE_SOURCE_DIR}/policies/*.lua)
list(TRANSFORM SB_POLICY_FILES PREPEND /etc/switchboard/policies/)
list(JOIN SB_POLICY_FILES "\n" SB_POLICY_CONFFILES)
file(WRITE ${CMAKE_BINARY_DIR}/deb/conffiles
     "/etc/switchboard/bot.env\n/etc/switchboard/sandboxd.env\n${SB_POLICY_CONFFILES}\n")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA ${SB_DEB_DIR}/postinst ${SB_DEB_DIR}/postrm
    ${CMAKE_BINARY_DIR}/deb/conffiles)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)

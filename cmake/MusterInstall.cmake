# Install rules for `cmake --install BUILD [--prefix DIR]`, included at the end of the top-level
# CMakeLists.txt.  Layout (docs/deploy.md):
#   bin/musterd bin/muster-worker bin/musterctl
#   include/muster.h
#   lib/libmuster.so.0.1.0 (SONAME libmuster.so.0) lib/libmuster.so.0 lib/libmuster.so lib/libmuster.a
#   lib/pkgconfig/muster.pc
#   lib/cmake/muster/{musterConfig,musterConfigVersion,musterTargets*}.cmake
#   lib/systemd/system/{musterd.service,muster-worker@.service}   (ExecStart points at bin/)
#   share/muster/python/muster.py  share/muster/examples/  share/muster/config/
#   share/muster/deploy/muster-worker-imds.sh
#   share/doc/muster/{deploy,libmuster}.md
# libmuster's own rules (library, header, muster.pc, CMake package) are in lib/CMakeLists.txt.
include(GNUInstallDirs)

# systemd units: deploy/systemd/*.service name /usr/local/bin (the default prefix); installed
# copies name the bin/ of the prefix actually installed to (which --prefix may change).
set(MUSTER_UNITS ${PROJECT_SOURCE_DIR}/deploy/systemd/musterd.service
  ${PROJECT_SOURCE_DIR}/deploy/systemd/muster-worker@.service)
install(CODE "
  foreach(unit ${MUSTER_UNITS})
    get_filename_component(name \"\${unit}\" NAME)
    file(READ \"\${unit}\" text)
    string(REPLACE \"/usr/local/bin/\" \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_BINDIR}/\" text \"\${text}\")
    set(dir \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/lib/systemd/system\")
    message(STATUS \"Installing: \${dir}/\${name}\")
    file(WRITE \"\${dir}/\${name}\" \"\${text}\")
  endforeach()")

install(PROGRAMS ${PROJECT_SOURCE_DIR}/deploy/ec2/muster-worker-imds.sh
  DESTINATION ${CMAKE_INSTALL_DATADIR}/muster/deploy)
install(FILES ${PROJECT_SOURCE_DIR}/python/muster.py
  DESTINATION ${CMAKE_INSTALL_DATADIR}/muster/python)
install(FILES ${PROJECT_SOURCE_DIR}/examples/submit_and_wait.c ${PROJECT_SOURCE_DIR}/examples/Makefile
  ${PROJECT_SOURCE_DIR}/examples/CMakeLists.txt DESTINATION ${CMAKE_INSTALL_DATADIR}/muster/examples)
install(FILES ${PROJECT_SOURCE_DIR}/docs/deploy.md ${PROJECT_SOURCE_DIR}/docs/libmuster.md
  DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/config/examples/
  DESTINATION ${CMAKE_INSTALL_DATADIR}/muster/config FILES_MATCHING PATTERN "*.json")

# Install for C users: `cmake --install build --prefix P` puts the headers, libmgraph
# (static) with the SentencePiece shim it links (shared), mgraph-run and
# mgraph-preprocess, a pkg-config file (mgraph.pc) and a CMake package config
# (find_package(mgraph) -> mgraph::mgraph) under P. Both files find the prefix relative
# to where they are installed, so --prefix chosen at install time works.
# tests/install/install_test.sh builds the README example against the installed tree.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(DIRECTORY ${CMAKE_SOURCE_DIR}/include/mgraph DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS mgraph mgraph_sentencepiece EXPORT mgraphTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
# the tools find the shim next to libmgraph, wherever the tree is installed
set_target_properties(mgraph-run mgraph-preprocess mgraph-convert mgraph-plan mgraph-generate PROPERTIES INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")
install(TARGETS mgraph-run mgraph-preprocess mgraph-convert mgraph-plan mgraph-generate RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

# ---- CMake package -------------------------------------------------------------------
set(MG_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/mgraph)
install(EXPORT mgraphTargets NAMESPACE mgraph:: DESTINATION ${MG_CMAKE_DIR})
configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/mgraphConfig.cmake.in
  ${CMAKE_BINARY_DIR}/mgraphConfig.cmake INSTALL_DESTINATION ${MG_CMAKE_DIR})
write_basic_package_version_file(${CMAKE_BINARY_DIR}/mgraphConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/mgraphConfig.cmake ${CMAKE_BINARY_DIR}/mgraphConfigVersion.cmake
  DESTINATION ${MG_CMAKE_DIR})

# ---- pkg-config ----------------------------------------------------------------------
# libmgraph is static: everything it calls goes on the link line (Requires, not
# Requires.private). MPI comes from FindMPI's own answer (no pkg-config name is portable).
file(RELATIVE_PATH MG_PC_TO_PREFIX /${CMAKE_INSTALL_LIBDIR}/pkgconfig /)
set(MG_PC_CFLAGS "")
set(MG_PC_LIBS "")
foreach(lib ${MPI_C_LIBRARIES})
  string(APPEND MG_PC_LIBS " ${lib}")
endforeach()
# what compiling against MPI takes (a program may call MPI itself: mpi.h found, its
# definitions and options), as FindMPI reports it
foreach(dir ${MPI_C_INCLUDE_DIRS})
  string(APPEND MG_PC_CFLAGS " -I${dir}")
endforeach()
foreach(def ${MPI_C_COMPILE_DEFINITIONS})
  string(APPEND MG_PC_CFLAGS " -D${def}")
endforeach()
foreach(opt ${MPI_C_COMPILE_OPTIONS})
  string(APPEND MG_PC_CFLAGS " ${opt}")
endforeach()
foreach(opt ${MPI_C_LINK_FLAGS})
  string(APPEND MG_PC_LIBS " ${opt}")
endforeach()
if(MG_HAVE_CUDA)
  string(APPEND MG_PC_CFLAGS " -DMG_HAVE_CUDA=1")
  string(APPEND MG_PC_LIBS " -L${CUDAToolkit_LIBRARY_DIR} -Wl,-rpath,${CUDAToolkit_LIBRARY_DIR} -lcudart -lcublas -lcublasLt ${MG_NCCL_LIB}")
endif()
if(MG_CUDA)
  # the kernels are C++ (nvcc): a C program linking them needs the C++ runtime
  string(APPEND MG_PC_CFLAGS " -DMG_CUDA=1")
  string(APPEND MG_PC_LIBS " -lstdc++")
  # in the build tree CMake adds it by itself (it knows mgraph has CUDA sources); a
  # C-only project importing mgraph::mgraph does not
  target_link_libraries(mgraph INTERFACE $<INSTALL_INTERFACE:stdc++>)
endif()
if(MG_SANITIZE)
  # an instrumented library needs the sanitizer runtimes in the program that links it
  string(APPEND MG_PC_LIBS " -fsanitize=address,undefined")
  target_link_options(mgraph INTERFACE -fsanitize=address,undefined)
endif()
configure_file(${CMAKE_SOURCE_DIR}/cmake/mgraph.pc.in ${CMAKE_BINARY_DIR}/mgraph.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/mgraph.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
